//! The web client's files (`web/` in the repository), served at `/`, `/avatar/` and a few
//! asset paths (issue 10).
//!
//! They are embedded in the binary, so it works from any directory with no install step.
//! The table is fixed: a path outside it is 404, so nothing on disk is ever reachable
//! through a URL. `MOBILE_WEB_DIR` (a development aid) reads the same files from a folder
//! once, at start-up, never on the event loop.
//!
//! Caching: every response carries a strong `ETag` (a hash of the bytes) and
//! `Cache-Control: no-cache`, so a browser revalidates each time with `If-None-Match`
//! and gets a body-less 304 until the binary's files change. HTML gets a strict
//! Content-Security-Policy: scripts and styles only from this origin, nothing inline.

use std::borrow::Cow;
use std::path::Path;

/// One servable file.
#[derive(Clone)]
struct File {
    url: &'static str,
    content_type: &'static str,
    body: Cow<'static, [u8]>,
    etag: String,
}

macro_rules! embedded {
    ($( $url:literal => $source:literal, $ty:literal; )*) => {
        &[ $( ($url, $source, $ty, include_bytes!(concat!("../../web/", $source)) as &[u8]), )* ]
    };
}

/// URL, file under `web/`, content type, embedded bytes.
type Entry = (&'static str, &'static str, &'static str, &'static [u8]);

const FILES: &[Entry] = embedded! {
    "/" => "index.html", "text/html; charset=utf-8";
    "/app.css" => "app.css", "text/css; charset=utf-8";
    "/app.js" => "app.js", "text/javascript; charset=utf-8";
    "/protocol.js" => "protocol.js", "text/javascript; charset=utf-8";
    "/icon.svg" => "icon.svg", "image/svg+xml";
    "/markdown.js" => "markdown.js", "text/javascript; charset=utf-8";
    "/history.js" => "history.js", "text/javascript; charset=utf-8";
    "/push.js" => "push.js", "text/javascript; charset=utf-8";
    "/voice.js" => "voice.js", "text/javascript; charset=utf-8";
    "/devices.js" => "devices.js", "text/javascript; charset=utf-8";
    "/vendor/markdown-it.min.js" => "vendor/markdown-it.min.js", "text/javascript; charset=utf-8";
    "/manifest.webmanifest" => "manifest.webmanifest", "application/manifest+json";
    "/sw.js" => "sw.js", "text/javascript; charset=utf-8";
    "/icons/icon-192.png" => "icons/icon-192.png", "image/png";
    "/icons/icon-512.png" => "icons/icon-512.png", "image/png";
    "/icons/maskable-512.png" => "icons/maskable-512.png", "image/png";
    "/avatar/" => "avatar/index.html", "text/html; charset=utf-8";
    "/avatar/avatar.css" => "avatar/avatar.css", "text/css; charset=utf-8";
    "/avatar/avatar.js" => "avatar/avatar.js", "text/javascript; charset=utf-8";
};

/// The service worker's URL, and the text in it that becomes the build's version.
const SERVICE_WORKER: &str = "/sw.js";
const BUILD_PLACEHOLDER: &str = "__HERMES_BUILD__";

/// A request for a web path, as the HTTP parser saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetRequest {
    /// The path without its query string.
    pub path: String,
    /// `HEAD`: the same headers, no body.
    pub head_only: bool,
    pub if_none_match: Option<String>,
    /// The `Host` header, when it is a plain host[:port] (for the CSP's ws: origin).
    pub host: Option<String>,
}

/// The web client, ready to answer requests.
#[derive(Clone)]
pub struct Web {
    files: Vec<File>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Web({} files, {} bytes)", self.files.len(), self.size())
    }
}

impl Web {
    /// The copies compiled into the binary.
    pub fn embedded() -> Web {
        let files = FILES
            .iter()
            .map(|&(url, _, content_type, bytes)| File::new(url, content_type, Cow::Borrowed(bytes)))
            .collect();
        Web::stamped(files)
    }

    /// The same table read from `dir` (a checkout's `web/`), for working on the page
    /// without rebuilding. Every file must be there: a half-missing client is refused
    /// at start-up rather than served broken.
    pub fn from_dir(dir: &Path) -> Result<Web, String> {
        let mut files = Vec::with_capacity(FILES.len());
        for &(url, source, content_type, _) in FILES {
            let path = dir.join(source);
            let bytes =
                std::fs::read(&path).map_err(|e| format!("MOBILE_WEB_DIR: cannot read {}: {e}", path.display()))?;
            files.push(File::new(url, content_type, Cow::Owned(bytes)));
        }
        Ok(Web::stamped(files))
    }

    /// Writes the build's version into the service worker (issue 18): a digest of every
    /// other file, so the worker's cache of the app shell is replaced exactly when one of
    /// them changes, and a browser sees a new `sw.js` (and installs it) at that moment.
    fn stamped(mut files: Vec<File>) -> Web {
        let version = files
            .iter()
            .filter(|f| f.url != SERVICE_WORKER)
            .fold(0xcbf2_9ce4_8422_2325u64, |h, f| fnv1a_continue(h, f.etag.as_bytes()));
        if let Some(sw) = files.iter_mut().find(|f| f.url == SERVICE_WORKER) {
            let text = String::from_utf8_lossy(&sw.body).replace(BUILD_PLACEHOLDER, &format!("{version:016x}"));
            *sw = File::new(SERVICE_WORKER, sw.content_type, Cow::Owned(text.into_bytes()));
        }
        Web { files }
    }

    /// Total bytes of the files (for the start-up log line).
    pub fn size(&self) -> usize {
        self.files.iter().map(|f| f.body.len()).sum()
    }

    /// A complete HTTP response for `req`: the file, a 304, or a 404.
    pub fn respond(&self, req: &AssetRequest) -> Vec<u8> {
        // `/avatar` without the slash, and `/index.html`: to the one URL each page has.
        // The pages use absolute paths (`/app.js`, `/ws`), so they must be served at the
        // root of a host; a proxy may not mount them under a path prefix.
        if req.path == "/avatar" || req.path == "/index.html" {
            let to = if req.path == "/avatar" { "/avatar/" } else { "/" };
            return plain(
                "308 Permanent Redirect",
                "moved\n",
                &format!("Location: {to}\r\n"),
                req.head_only,
            );
        }
        let Some(file) = self.files.iter().find(|f| f.url == req.path) else {
            return plain("404 Not Found", "not found\n", "", req.head_only);
        };
        let mut headers = format!(
            "ETag: {}\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n",
            file.etag
        );
        if file.content_type.starts_with("text/html") {
            headers.push_str(&format!(
                "Content-Security-Policy: {}\r\n",
                csp(req.host.as_deref(), file.url == "/")
            ));
        }
        if req
            .if_none_match
            .as_deref()
            .is_some_and(|v| etag_matches(v, &file.etag))
        {
            return format!("HTTP/1.1 304 Not Modified\r\n{headers}Connection: close\r\n\r\n").into_bytes();
        }
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n",
            file.content_type,
            file.body.len()
        )
        .into_bytes();
        if !req.head_only {
            out.extend_from_slice(&file.body);
        }
        out
    }

    /// The URLs served.
    #[cfg(test)]
    fn urls(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.files.iter().map(|f| f.url)
    }
}

impl File {
    fn new(url: &'static str, content_type: &'static str, body: Cow<'static, [u8]>) -> File {
        let etag = format!("\"{:016x}\"", fnv1a(&body));
        File {
            url,
            content_type,
            body,
            etag,
        }
    }
}

fn plain(status: &str, body: &str, extra: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nX-Content-Type-Options: nosniff\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    out.into_bytes()
}

/// The chat page may be framed only by its own origin; the avatar page by anyone (a
/// phone app shows it in a WebView, perhaps inside its own page).
fn csp(host: Option<&str>, chat: bool) -> String {
    // CSP 3 lets 'self' match ws: and wss: of the same host, but older WebViews do not;
    // naming the page's own origin covers them.
    let ws = host.map(|h| format!(" ws://{h} wss://{h}")).unwrap_or_default();
    let mut policy = format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; connect-src 'self'{ws}; object-src 'none'; base-uri 'none'; form-action 'none'"
    );
    if chat {
        policy.push_str("; frame-ancestors 'self'");
    }
    policy
}

/// A `Host` header fit to be written into a header: host name, IPv4 or [IPv6], and a port.
pub fn clean_host(raw: &[u8]) -> Option<String> {
    let ok = !raw.is_empty()
        && raw.len() <= 255
        && raw
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    ok.then(|| String::from_utf8_lossy(raw).into_owned())
}

/// `If-None-Match: "a", W/"b"` or `*`. Weak tags match too (RFC 9110 13.1.2: weak
/// comparison for If-None-Match).
fn etag_matches(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t == etag)
}

/// FNV-1a, 64 bits: enough to tell versions of a few files apart, and no dependency.
fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_continue(0xcbf2_9ce4_8422_2325, bytes)
}

fn fnv1a_continue(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> AssetRequest {
        AssetRequest {
            path: path.into(),
            head_only: false,
            if_none_match: None,
            host: Some("pi.local:8787".into()),
        }
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
        resp.split("\r\n\r\n").next()?.lines().find_map(|l| {
            l.split_once(": ")
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
    }

    #[test]
    fn every_file_has_its_type_and_the_safety_headers() {
        let web = Web::embedded();
        for url in web.urls() {
            let resp = text(&web.respond(&get(url)));
            assert!(
                resp.starts_with("HTTP/1.1 200 OK"),
                "{url}: {}",
                resp.lines().next().unwrap()
            );
            assert_eq!(header(&resp, "X-Content-Type-Options"), Some("nosniff"), "{url}");
            assert_eq!(header(&resp, "Cache-Control"), Some("no-cache"), "{url}");
            assert!(header(&resp, "ETag").is_some_and(|e| e.starts_with('"')), "{url}");
            let ty = header(&resp, "Content-Type").unwrap();
            let want = match url.rsplit('.').next().unwrap() {
                "css" => "text/css",
                "js" => "text/javascript",
                "svg" => "image/svg+xml",
                "png" => "image/png",
                "webmanifest" => "application/manifest+json",
                _ => "text/html",
            };
            assert!(ty.starts_with(want), "{url}: {ty}");
        }
    }

    #[test]
    fn the_service_worker_carries_the_builds_version() {
        // issue 18: its cache of the app shell is named by a digest of the other files.
        let body = |web: &Web| {
            let resp = web.respond(&get("/sw.js"));
            String::from_utf8_lossy(&resp).into_owned()
        };
        let web = Web::embedded();
        let sw = body(&web);
        assert!(!sw.contains(BUILD_PLACEHOLDER), "the placeholder is replaced");
        let mut files: Vec<File> = FILES
            .iter()
            .map(|&(url, _, ty, bytes)| File::new(url, ty, Cow::Borrowed(bytes)))
            .collect();
        let app = files.iter_mut().find(|f| f.url == "/app.js").unwrap();
        *app = File::new("/app.js", app.content_type, Cow::Owned(b"changed".to_vec()));
        let changed = Web::stamped(files);
        assert_ne!(body(&changed), sw, "another app.js, another version");
    }

    #[test]
    fn html_gets_a_strict_csp_naming_its_own_websocket_origin() {
        let web = Web::embedded();
        let resp = text(&web.respond(&get("/")));
        let csp = header(&resp, "Content-Security-Policy").unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{csp}");
        assert!(
            csp.contains("connect-src 'self' ws://pi.local:8787 wss://pi.local:8787"),
            "{csp}"
        );
        assert!(
            csp.contains("img-src 'self' blob: data:") && csp.contains("media-src 'self' blob:"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        let avatar = text(&web.respond(&get("/avatar/")));
        let csp = header(&avatar, "Content-Security-Policy").unwrap();
        assert!(
            !csp.contains("frame-ancestors"),
            "the avatar page is for any app's WebView: {csp}"
        );
        let js = text(&web.respond(&get("/app.js")));
        assert!(header(&js, "Content-Security-Policy").is_none());
    }

    #[test]
    fn a_host_that_is_not_plain_is_left_out_of_the_csp() {
        assert_eq!(clean_host(b"[::1]:8787").as_deref(), Some("[::1]:8787"));
        for bad in [&b"x; script-src *"[..], b"a\r\nb", b"", b"h\"t"] {
            assert_eq!(clean_host(bad), None, "{bad:?}");
        }
        let web = Web::embedded();
        let mut req = get("/");
        req.host = None;
        let resp = text(&web.respond(&req));
        assert!(header(&resp, "Content-Security-Policy")
            .unwrap()
            .contains("connect-src 'self';"));
    }

    #[test]
    fn if_none_match_gets_304_without_a_body_and_head_gets_no_body() {
        let web = Web::embedded();
        let full = text(&web.respond(&get("/app.css")));
        let etag = header(&full, "ETag").unwrap().to_owned();
        for inm in [etag.clone(), format!("W/{etag}"), format!("\"x\", {etag}"), "*".into()] {
            let mut req = get("/app.css");
            req.if_none_match = Some(inm.clone());
            let resp = text(&web.respond(&req));
            assert!(resp.starts_with("HTTP/1.1 304"), "{inm}");
            assert!(resp.ends_with("\r\n\r\n"), "a 304 has no body");
        }
        let mut req = get("/app.css");
        req.if_none_match = Some("\"other\"".into());
        assert!(text(&web.respond(&req)).starts_with("HTTP/1.1 200"));
        req.if_none_match = None;
        req.head_only = true;
        let head = text(&web.respond(&req));
        assert!(head.ends_with("\r\n\r\n"));
        assert_eq!(header(&head, "Content-Length"), header(&full, "Content-Length"));
    }

    #[test]
    fn unknown_paths_are_404_and_nothing_outside_the_table_is_reachable() {
        let web = Web::embedded();
        for path in [
            "/nope",
            "/web/app.js",
            "/../Cargo.toml",
            "/avatar/../app.js",
            "/app.js/",
            "/favicon.ico",
            "/index.html/",
        ] {
            assert!(text(&web.respond(&get(path))).starts_with("HTTP/1.1 404"), "{path}");
        }
        assert!(text(&web.respond(&get("/avatar"))).contains("Location: /avatar/"));
    }

    #[test]
    fn the_embedded_files_stay_small() {
        // issue 10: about 100 KiB for the whole client; issue 18 adds the vendored
        // Markdown renderer (about 100 KiB), the service worker and the icons; issue 24
        // the journal's client (resume, history pages, forget: about 25 KiB); issue 26
        // pairing codes and the Devices panel (about 11 KiB). Every byte here is in the
        // binary, which must stay under 5 MiB with SQLite (PERFORMANCE.md).
        let size = Web::embedded().size();
        assert!(size < 364 * 1024, "web/ is {size} bytes");
    }
}
