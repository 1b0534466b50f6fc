//! The bytes of a Web Push request (RFC 8030 section 5): the encrypted body, `TTL`
//! always, `Urgency` and `Topic` for cards, and the VAPID `Authorization`.

use std::sync::Arc;

use hermes_mobile::push::{Endpoint, Subscription};
use hermes_mobile::wire::push::from_b64url;
use hermes_mobile::Time;
use rustls::ClientConfig;

use super::content::{web_push_payload, AnswerLinks};
use super::sender::Job;
use super::vapid::Vapid;
use super::PushSettings;
use crate::http_client::{tls, Target};

pub struct Request {
    pub target: Arc<Target>,
    pub bytes: Vec<u8>,
}

/// The POST for one subscription. The host is checked against the allow-list again: a
/// subscription kept from before a change of `MOBILE_PUSH_HOSTS` is not used.
#[allow(clippy::too_many_arguments)]
pub fn web_push(
    job: &Job,
    sub: &Subscription,
    now: Time,
    app_url: Option<&str>,
    links: Option<&AnswerLinks>,
    settings: &PushSettings,
    vapid: &Vapid,
    tls_config: &Arc<ClientConfig>,
    unix_now: u64,
) -> Result<Request, String> {
    let endpoint: Endpoint = settings.hosts.check(&sub.endpoint).map_err(|e| e.to_string())?;
    let (p256dh, auth) = match (from_b64url(&sub.p256dh), from_b64url(&sub.auth)) {
        (Some(k), Some(a)) => (k, a),
        _ => return Err("the subscription's keys are not base64url".into()),
    };
    // Too long for one record (a long page address, repeated by each button): first without
    // the buttons, then without the address too (the notification opens the chat's scope).
    let encrypt = |payload: Vec<u8>| super::ece::encrypt(&p256dh, &auth, &payload);
    let body = match encrypt(web_push_payload(&job.content, app_url, links)) {
        Err(super::ece::EceError::TooLong) if links.is_some() => {
            match encrypt(web_push_payload(&job.content, app_url, None)) {
                Err(super::ece::EceError::TooLong) => encrypt(web_push_payload(&job.content, None, None)),
                other => other,
            }
        }
        Err(super::ece::EceError::TooLong) => encrypt(web_push_payload(&job.content, None, None)),
        other => other,
    }
    .map_err(|e| e.to_string())?;
    let authorization = vapid.authorization(&endpoint.origin(), &settings.subject, unix_now);
    let host_header = match endpoint.port {
        443 => endpoint.host.clone(),
        port => format!("{}:{port}", endpoint.host),
    };
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {host_header}\r\nTTL: {}\r\nContent-Encoding: aes128gcm\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nAuthorization: {authorization}\r\n",
        endpoint.path,
        job.ttl_secs(now),
        body.len(),
    );
    head.push_str(if job.content.urgent {
        "Urgency: high\r\n"
    } else {
        "Urgency: normal\r\n"
    });
    if let Some(topic) = &job.topic {
        head.push_str(&format!("Topic: {topic}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&body);
    let name = tls::server_name(endpoint.bare_host())?;
    let target = Target {
        host: endpoint.bare_host().to_owned(),
        port: endpoint.port,
        tls: Some((tls_config.clone(), name)),
        timeouts: Some(super::PUSH_TIMEOUTS),
    };
    Ok(Request {
        target: Arc::new(target),
        bytes,
    })
}
