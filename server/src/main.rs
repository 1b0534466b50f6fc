//! The hermes-mobile gateway binary. The event loop lands with the server issue; until then
//! this only explains itself, so that `cargo run --release` at the root builds and says what
//! is missing instead of failing.

fn main() {
    eprintln!(
        "hermes-mobile {}: the server is not built yet; the protocol core is in the hermes_mobile library",
        env!("CARGO_PKG_VERSION")
    );
    std::process::exit(2);
}
