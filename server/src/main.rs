//! `hermes-mobile`: the gateway server, `send` for cron, and `token` for pairing a phone
//! (the command line is `hermes_mobile_server::cli`).

fn main() {
    std::process::exit(hermes_mobile_server::cli::main());
}
