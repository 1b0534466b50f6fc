//! The command line: the gateway server, `send` for cron, `token`, `pair` and `devices` for
//! pairing phones (devices_cli.rs), and `hermes` for the Hermes plugin.

use std::collections::HashMap;

use crate::state::TokenOrigin;
use crate::{config, env_file, hermes, history_cli, memory, pair, send, server, state};

/// Runs the command line: the exit status.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: HashMap<String, String> = std::env::vars().collect();
    match args.first().map(String::as_str) {
        Some("--help" | "-h" | "help") => {
            print!("{}", config::help());
            0
        }
        Some("--version" | "-V") => {
            println!("hermes-mobile {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Some("send") => match env_file::layered(&env, &args[1..], env_file::Unreadable::Skip) {
            Ok(l) => send::run(&l.env, &l.args),
            Err(e) => fail(e, send::EXIT_USAGE),
        },
        Some("token") => token(&env, &args[1..]),
        Some("pair") => crate::devices_cli::pair_run(&env, &args[1..]),
        Some("devices") => crate::devices_cli::devices_run(&env, &args[1..]),
        Some("hermes") => hermes::run(&env, &args[1..]),
        Some("history") => history_cli::run(&env, &args[1..]),
        Some("serve") => serve(&env, &args[1..]),
        _ => serve(&env, &args),
    }
}

fn fail(message: impl std::fmt::Display, code: i32) -> i32 {
    eprintln!("hermes-mobile: {message}");
    code
}

/// The token the server would use, created in the state directory if needed (decisions C3).
fn resolve_token(config: &mut config::ServerConfig) -> Result<TokenOrigin, String> {
    if config.token_given {
        return Ok(TokenOrigin::Configured);
    }
    let (token, origin) = state::stored_token(&config.state_dir)?;
    if let TokenOrigin::Stored(path) = &origin {
        // L55 holds for a token file written by hand too; a generated one is 43 characters.
        if token.chars().count() < config::validate::MIN_SECRET_CHARS {
            return Err(format!(
                "the token in {path:?} is under {} characters, so it can be guessed: delete the file to have a new one generated",
                config::validate::MIN_SECRET_CHARS
            ));
        }
    }
    config.core.token = token;
    Ok(origin)
}

/// `hermes-mobile token`: the token in use, read from the service's settings file too, so
/// that `sudo hermes-mobile token` on a Pi prints the token the service generated.
fn token(env: &HashMap<String, String>, args: &[String]) -> i32 {
    match token_in_use(env, args) {
        Ok(config) => {
            println!("{}", config.core.token);
            0
        }
        Err((e, code)) => fail(e, code),
    }
}

/// The configuration with the token the server uses (read, never created, when the
/// service's settings file names the state directory).
fn token_in_use(env: &HashMap<String, String>, args: &[String]) -> Result<config::ServerConfig, (String, i32)> {
    let l = env_file::layered(env, args, env_file::Unreadable::Fail).map_err(|e| (e.to_string(), 2))?;
    // Only the app token: `token` and `pair` show nothing else.
    let s = config::secrets::resolve(&l.env, &l.args, &["MOBILE_TOKEN"], &config::secrets::read_secret_file)
        .map_err(|e| (e, 2))?;
    let mut config = config::parse(&s.env, &s.args).map_err(|e| (e, 2))?;
    if let Some(file) = l.file.filter(|_| !config.token_given) {
        // Creating a token here would leave it owned by root, unreadable by the service.
        let path = config.state_dir.join("token");
        if !path.exists() {
            return Err((
                format!(
                    "no token yet in {} (state directory from {}): start the service once \
                     (systemctl start hermes-mobile), then ask again",
                    path.display(),
                    file.display()
                ),
                1,
            ));
        }
    }
    resolve_token(&mut config).map_err(|e| (e, 1))?;
    Ok(config)
}

fn serve(env: &HashMap<String, String>, args: &[String]) -> i32 {
    // L55: secrets from files (systemd credentials, Docker secrets) before the settings.
    let secrets = match config::secrets::resolve(env, args, &config::secrets::all(), &config::secrets::read_secret_file)
    {
        Ok(r) => r,
        Err(e) => return fail(e, 2),
    };
    let mut config = match config::parse(&secrets.env, &secrets.args) {
        Ok(c) => c,
        Err(e) => return fail(e, 2),
    };
    if let Err(e) = config.read_files() {
        return fail(e, 2);
    }
    let _ = simple_logger::SimpleLogger::new().with_level(config.log_level).init();
    memory::return_large_blocks_promptly();
    memory::forbid_inspection();
    if let Some(warning) = &config.log_warning {
        log::warn!("{warning}");
    }
    for warning in &secrets.warnings {
        log::warn!("{warning}");
    }
    let env = &secrets.env;
    let mut show_token = false;
    match resolve_token(&mut config) {
        Ok(TokenOrigin::Created(path)) if env.contains_key("INVOCATION_ID") => {
            // Under systemd stdout is the journal, which more people may read than the
            // owner-only token file: say where it is, not what it is.
            println!(
                "New app token kept in {}; print it with: sudo hermes-mobile token. Pair a phone with: sudo hermes-mobile pair --owner",
                path.display()
            );
        }
        Ok(TokenOrigin::Created(path)) => {
            // C3: shown once, on creation, on stdout, never through the log.
            println!(
                "New app token (kept in {}; for your own apps and the SDKs: phones pair with the link below):\n{}",
                path.display(),
                config.core.token
            );
            show_token = true;
        }
        Ok(TokenOrigin::Stored(path)) => log::info!("using the app token kept in {:?}", path),
        Ok(TokenOrigin::Configured) => log::info!("using the app token from MOBILE_TOKEN"),
        Err(e) => return fail(e, 1),
    }
    if let Err(e) = config::validate::agent_token_is_its_own(&config) {
        return fail(e, 2);
    }
    let seed = match state::random_bytes::<8>() {
        Ok(b) => u64::from_le_bytes(b),
        Err(e) => return fail(format!("no random source: {e}"), 1),
    };
    let (host, port) = (config.host.clone(), config.port);
    // Issue 26: on the first start, a pairing link for the owner's phone, with a code that
    // pairs it once (never the token: L43's link is gone).
    let first_code = match show_token.then(state::random_bytes::<{ hermes_mobile::devices::codes::CODE_BYTES }>) {
        Some(Ok(random)) => Some(hermes_mobile::devices::codes::encode(&random)),
        _ => None,
    };
    let web = config.web.is_some();
    match (&config.web, config.web_dir.as_deref()) {
        (Some(w), Some(dir)) => log::info!("web client: {} bytes read from {}", w.size(), dir),
        (Some(w), None) => log::info!("web client: {} bytes built in, at / and /avatar/", w.size()),
        (None, _) => log::info!("web client: off (MOBILE_WEB=off)"),
    }
    let mut server = match server::Server::bind(config, seed) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return fail(e.to_string(), 1),
        Err(e) => return fail(format!("cannot listen on {host}:{port}: {e}"), 1),
    };
    let ttl = hermes_mobile::devices::codes::DEFAULT_TTL;
    let first_code = first_code.filter(|code| server.add_pair_code(code, true, ttl));
    let pairing = pair::Pairing {
        urls: pair::page_urls(&host, server.local_addr().port(), &pair::lan_addresses()),
        code: first_code.as_deref().map(|code| pair::Code {
            code,
            minutes: ttl.as_secs() / 60,
            owner: true,
        }),
        qr: first_code.is_some(),
        web,
    };
    if let Err(e) = pair::print(&mut std::io::stdout().lock(), &pairing) {
        log::warn!("could not print where to open the chat: {e}");
    }
    log::info!(
        "listening on ws://{}/ws (agent: {})",
        server.local_addr(),
        server.agent_summary()
    );
    match server.run() {
        Ok(()) => 0,
        Err(e) => fail(format!("event loop failed: {e}"), 1),
    }
}
