//! The rules that tie settings together, in one place: each setting's own value is
//! checked where it is parsed, and these look at several at once.

use super::{AgentKind, ServerConfig};

/// The shortest secret accepted (issue 23 #3, L55): 16 characters of a random token are
/// far beyond guessing at any rate L52 lets through.
pub const MIN_SECRET_CHARS: usize = 16;

/// L55: one line that says which secret is weak and how to make a good one, never the secret.
fn weak(name: &str) -> String {
    format!(
        "{name} must be at least {MIN_SECRET_CHARS} characters, or it can be guessed; make one with: head -c 18 /dev/urandom | base64"
    )
}

/// Every token a peer could present is long enough (the agent token's own rule is below).
fn tokens_are_strong(config: &ServerConfig) -> Result<(), String> {
    let short = |t: &str| t.chars().count() < MIN_SECRET_CHARS;
    let core = &config.core;
    if config.token_given && short(&core.token) {
        return Err(weak("MOBILE_TOKEN") + " (or leave it unset to have one generated)");
    }
    if core.extra_tokens.iter().any(|(_, t)| short(t)) {
        return Err(weak("every MOBILE_EXTRA_TOKENS token"));
    }
    if core.deliver_tokens.iter().any(|t| short(t)) {
        return Err(weak("every MOBILE_DELIVER_TOKENS token"));
    }
    if config
        .push
        .as_ref()
        .and_then(|p| p.ntfy_token.as_deref())
        .is_some_and(short)
    {
        return Err(weak("MOBILE_NTFY_TOKEN"));
    }
    Ok(())
}

/// The rules that need only the settings (run at the end of `parse`).
pub fn settings(config: &ServerConfig) -> Result<(), String> {
    tokens_are_strong(config)?;
    // L39: /agent exists only in link mode, and its token is not a guessable one.
    if let Some(token) = &config.agent_token {
        if !matches!(config.agent, AgentKind::Link(_)) {
            return Err("MOBILE_AGENT_TOKEN opens /agent, which needs MOBILE_AGENT=link".into());
        }
        if token.chars().count() < MIN_SECRET_CHARS {
            return Err(weak("MOBILE_AGENT_TOKEN"));
        }
    }
    Ok(())
}

/// L39: no token a phone or a service holds may make its holder the agent. Run once the
/// app token is known (it may have been generated or read from the state directory).
pub fn agent_token_is_its_own(config: &ServerConfig) -> Result<(), String> {
    let Some(agent_token) = &config.agent_token else {
        return Ok(());
    };
    let core = &config.core;
    let others = std::iter::once(&core.token)
        .chain(core.extra_tokens.iter().map(|(_, t)| t))
        .chain(core.deliver_tokens.iter());
    if others
        .into_iter()
        .any(|t| hermes_mobile::agent_link::tokens_equal(agent_token, t))
    {
        return Err("MOBILE_AGENT_TOKEN must differ from the app token and every phone or deliver token: a phone must not be able to act as the agent".into());
    }
    Ok(())
}
