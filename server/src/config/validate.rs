//! The rules that tie settings together, in one place: each setting's own value is
//! checked where it is parsed, and these look at several at once.

use super::{AgentKind, ServerConfig};

/// The rules that need only the settings (run at the end of `parse`).
pub fn settings(config: &ServerConfig) -> Result<(), String> {
    // L39: /agent exists only in link mode, and its token is not a guessable one.
    if let Some(token) = &config.agent_token {
        if !matches!(config.agent, AgentKind::Link(_)) {
            return Err("MOBILE_AGENT_TOKEN opens /agent, which needs MOBILE_AGENT=link".into());
        }
        if token.chars().count() < 16 {
            return Err("MOBILE_AGENT_TOKEN must be at least 16 characters".into());
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
