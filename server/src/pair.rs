//! Where to open the web client, and the pairing link (issue 10, decisions L43; issue 26).
//!
//! The link carries a pairing code in its fragment (`/#pair=…`), never the app token: a
//! code pairs one device, once, within minutes. A browser never sends a fragment to the
//! server, so the code reaches no request line and no log, and the page removes it from
//! the address bar once read. This output goes to stdout, never
//! through `log` (decisions H1).

use std::io::Write;
use std::net::Ipv4Addr;

/// The IPv4 addresses of this host's interfaces that are up and not loopback, in
/// interface order, without duplicates. Empty when they cannot be listed.
pub fn lan_addresses() -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we only read and then free once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
        let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as libc::c_uint != 0;
        if !up || loopback || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of its stated family.
        let family = unsafe { (*ifa.ifa_addr).sa_family };
        if i32::from(family) != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if !ip.is_loopback() && !ip.is_unspecified() && !out.contains(&ip) {
            out.push(ip);
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The page's addresses for a server listening on `host:port`: every LAN address and
/// localhost for a wildcard address, else the address itself.
pub fn page_urls(host: &str, port: u16, lan: &[Ipv4Addr]) -> Vec<String> {
    let host = host.trim();
    if matches!(host, "0.0.0.0" | "::" | "[::]" | "") {
        let mut urls: Vec<String> = lan.iter().map(|ip| format!("http://{ip}:{port}/")).collect();
        urls.push(format!("http://localhost:{port}/"));
        return urls;
    }
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    vec![format!("http://{host}:{port}/")]
}

/// `url#pair=…`: a pairing code in the fragment, percent-encoded (a code is base64url, so
/// nothing needs it; the page decodes anyway).
pub fn pairing_link(url: &str, code: &str) -> String {
    let mut link = format!("{url}#pair=");
    for b in code.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            link.push(char::from(b));
        } else {
            link.push_str(&format!("%{b:02X}"));
        }
    }
    link
}

/// The link as a QR code drawn with Unicode half blocks, two modules per character
/// row, quiet zone included. Light modules are drawn as blocks, so it reads on the usual
/// light-on-dark terminal; on a dark-on-light one it comes out inverted, which most phone
/// scanners still read (otherwise open the link itself). `None` when the link is too
/// long for a QR code.
pub fn qr_text(link: &str) -> Option<String> {
    let code = qrcode::QrCode::new(link.as_bytes()).ok()?;
    let width = code.width();
    let colors = code.to_colors();
    let dark = |x: isize, y: isize| -> bool {
        let inside = (0..width as isize).contains(&x) && (0..width as isize).contains(&y);
        inside && colors[y as usize * width + x as usize] == qrcode::Color::Dark
    };
    let quiet = 4isize;
    let mut out = String::new();
    let mut y = -quiet;
    while y < width as isize + quiet {
        for x in -quiet..width as isize + quiet {
            // Light modules are drawn as blocks: the code reads correctly on the usual
            // dark terminal, where the background shows through as the dark modules.
            out.push(match (!dark(x, y), !dark(x, y + 1)) {
                (true, true) => '█',
                (true, false) => '▀',
                (false, true) => '▄',
                (false, false) => ' ',
            });
        }
        out.push('\n');
        y += 2;
    }
    Some(out)
}

/// A pairing code to show (issue 26): single-use, for `minutes`.
pub struct Code<'a> {
    pub code: &'a str,
    pub minutes: u64,
    pub owner: bool,
}

/// What to show.
pub struct Pairing<'a> {
    pub urls: Vec<String>,
    /// A pairing code, when one was made (`pair`, or the first start).
    pub code: Option<Code<'a>>,
    pub qr: bool,
    pub web: bool,
}

/// Writes the block to `out` (stdout in practice).
pub fn print(out: &mut impl Write, p: &Pairing<'_>) -> std::io::Result<()> {
    if !p.web {
        writeln!(
            out,
            "The web client is off (MOBILE_WEB=off); phones connect to ws://…/ws."
        )?;
        if let Some(c) = &p.code {
            writeln!(
                out,
                "Pairing code (POST it to /pair within {} min; it works once): {}",
                c.minutes, c.code
            )?;
        }
        return Ok(());
    }
    writeln!(out, "Open the chat in a browser:")?;
    for url in &p.urls {
        writeln!(out, "  {url}")?;
    }
    let Some(c) = &p.code else {
        return writeln!(
            out,
            "and pair it: run `hermes-mobile pair` for a pairing link and QR code."
        )
        .and_then(|()| out.flush());
    };
    let first = p.urls.first().map(String::as_str).unwrap_or("http://localhost:8787/");
    let what = if c.owner { "an owner device" } else { "one device" };
    writeln!(
        out,
        "Pairing link (pairs {what}, once, within {} min; it holds no lasting secret):",
        c.minutes
    )?;
    for url in &p.urls {
        writeln!(out, "  {}", pairing_link(url, c.code))?;
    }
    if p.qr {
        if let Some(qr) = qr_text(&pairing_link(first, c.code)) {
            writeln!(out, "Scan with a phone on the same network ({first}):")?;
            out.write_all(qr.as_bytes())?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_is_reached_at_every_lan_address_and_localhost() {
        let lan = [Ipv4Addr::new(192, 168, 1, 5), Ipv4Addr::new(10, 0, 0, 2)];
        assert_eq!(
            page_urls("0.0.0.0", 8787, &lan),
            [
                "http://192.168.1.5:8787/",
                "http://10.0.0.2:8787/",
                "http://localhost:8787/"
            ]
        );
        assert_eq!(page_urls("127.0.0.1", 9000, &lan), ["http://127.0.0.1:9000/"]);
        assert_eq!(page_urls("::1", 9000, &lan), ["http://[::1]:9000/"]);
    }

    #[test]
    fn the_code_travels_in_the_fragment_percent_encoded() {
        assert_eq!(
            pairing_link("http://h:1/", "abc-DEF_1.2~"),
            "http://h:1/#pair=abc-DEF_1.2~"
        );
        assert_eq!(
            pairing_link("http://h:1/", "a b&c#é"),
            "http://h:1/#pair=a%20b%26c%23%C3%A9"
        );
    }

    #[test]
    fn the_qr_code_is_square_and_made_of_half_blocks() {
        let qr = qr_text("http://192.168.1.5:8787/#token=0123456789abcdef0123456789abcdef").unwrap();
        let lines: Vec<&str> = qr.lines().collect();
        let width = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == width));
        // Two module rows per text row, plus the quiet zone.
        assert!((width / 2).abs_diff(lines.len()) <= 1, "{width} x {}", lines.len());
        assert!(qr.chars().all(|c| matches!(c, '█' | '▀' | '▄' | ' ' | '\n')));
    }

    #[test]
    fn without_a_code_only_the_addresses_are_printed() {
        let mut out = Vec::new();
        let p = Pairing {
            urls: vec!["http://localhost:8787/".into()],
            code: None,
            qr: true,
            web: true,
        };
        print(&mut out, &p).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("http://localhost:8787/") && !text.contains("#pair="),
            "{text}"
        );
        assert!(text.contains("hermes-mobile pair"));
    }

    #[test]
    fn a_code_is_printed_as_a_pairing_link_and_never_a_token() {
        let mut out = Vec::new();
        let p = Pairing {
            urls: vec!["http://localhost:8787/".into()],
            code: Some(Code {
                code: "AAAAAAAAAAAAAAAAAAAAAA",
                minutes: 10,
                owner: false,
            }),
            qr: false,
            web: true,
        };
        print(&mut out, &p).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("http://localhost:8787/#pair=AAAAAAAAAAAAAAAAAAAAAA"),
            "{text}"
        );
        assert!(!text.contains("#token="), "{text}");
    }

    #[test]
    fn lan_addresses_are_never_loopback() {
        assert!(lan_addresses().iter().all(|ip| !ip.is_loopback()));
    }
}
