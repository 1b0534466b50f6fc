//! The TLS settings for an `https://` agent (issue 11).
//!
//! rustls with the `ring` provider: smaller and quicker to build for the Pi than aws-lc,
//! with no C toolchain beyond what `ring` needs. Trust comes from the system's
//! certificate store (`rustls-native-certs`: the CA bundle Debian's `ca-certificates`
//! keeps up to date, so a Pi that gets security updates gets new roots too, and an
//! owner's own CA added to the system store just works) plus, for a self-signed home
//! server, the certificates in `MOBILE_AGENT_CA_FILE`. Both are read once, at start-up.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// The client settings: roots from the system store and `ca_file`, which is the value of
/// the setting `setting` (named in errors). With no root at all it is an error, unless
/// `optional` (push, on by default: a host without ca-certificates must still start; its
/// pushes then fail with a TLS error in the log and `/healthz`).
pub fn client_config(ca_file: Option<&Path>, setting: &str, optional: bool) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A certificate the store holds but rustls cannot use is skipped, not fatal.
        let _ = roots.add(cert);
    }
    let system = roots.len();
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| format!("{setting} {}: {e}", path.display()))?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{setting} {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!("{setting} {} holds no PEM certificate", path.display()));
        }
        log::info!("TLS ({setting}): {added} certificate(s) from {:?}", path);
    }
    if roots.is_empty() {
        let why = format!("no trusted certificates for https: install ca-certificates or set {setting}");
        if !optional {
            return Err(why);
        }
        log::warn!("{why}");
    }
    log::debug!("TLS: {system} certificates from the system store");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The name the server's certificate must carry.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_owned()).map_err(|_| format!("{host:?} cannot be checked against a certificate"))
}
