//! MIME guessing and file-name sanitizing (decisions U6).

/// The MIME type for a file name's extension, `application/octet-stream` when unknown.
pub fn guess_mime(filename: &str) -> &'static str {
    let ext = match filename.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() || !ext.is_empty() => ext.to_ascii_lowercase(),
        _ => return "application/octet-stream",
    };
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        "bmp" => "image/bmp",
        "svg" => "image/svg+xml",
        "mp4" | "m4v" => "video/mp4",
        "mov" => "video/quicktime",
        "webm" => "video/webm",
        "mkv" => "video/x-matroska",
        "3gp" => "video/3gpp",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "aac" => "audio/aac",
        "wav" => "audio/wav",
        "flac" => "audio/flac",
        "amr" => "audio/amr",
        "pdf" => "application/pdf",
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "xml" => "application/xml",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        "doc" => "application/msword",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xls" => "application/vnd.ms-excel",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "ppt" => "application/vnd.ms-powerpoint",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "odt" => "application/vnd.oasis.opendocument.text",
        "epub" => "application/epub+zip",
        _ => "application/octet-stream",
    }
}

/// A file name that is safe to join to a directory: no path separators, no `..`, no control
/// characters, no leading dot (no hidden files), never empty. The name as sent is kept for
/// display; only this form may touch a file system.
pub fn sanitize_filename(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        // L18: controls, and (issue 23 #7) Cf, Zl and Zp, which could make
        // `invoice\u{202E}gnp.exe` display as "invoiceexe.png".
        let bad = crate::hidden::is_hidden(c) || c.is_control() || matches!(c, '/' | '\\' | ':' | '\0');
        out.push(if bad { '_' } else { c });
    }
    // `..` anywhere could still be read as a parent by a careless consumer; collapse it.
    while out.contains("..") {
        out = out.replace("..", ".");
    }
    let trimmed = out.trim_matches(|c: char| c == '.' || c.is_whitespace());
    if trimmed.is_empty() {
        "file".to_owned()
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_is_guessed_from_the_extension() {
        // decisions U6
        assert_eq!(guess_mime("photo.JPG"), "image/jpeg");
        assert_eq!(guess_mime("notes.pdf"), "application/pdf");
        assert_eq!(guess_mime("README"), "application/octet-stream");
        assert_eq!(guess_mime(""), "application/octet-stream");
        assert_eq!(guess_mime("archive.unknownext"), "application/octet-stream");
    }

    #[test]
    fn file_names_cannot_escape_a_directory() {
        // decisions U6
        assert_eq!(sanitize_filename("../../etc/passwd"), "_._etc_passwd");
        let windows = sanitize_filename("..\\..\\boot.ini");
        assert!(!windows.contains('\\') && !windows.contains("..") && windows.ends_with("boot.ini"));
        assert_eq!(sanitize_filename("a\nb\u{7}c.txt"), "a_b_c.txt");
        assert_eq!(sanitize_filename(".."), "file");
        // decisions L18, issue 23 #7: format characters cannot disguise an extension.
        assert_eq!(sanitize_filename("invoice\u{202E}gnp.exe"), "invoice_gnp.exe");
        assert_eq!(sanitize_filename("a\u{200B}b\u{2028}c\u{FEFF}.txt"), "a_b_c_.txt");
        assert_eq!(sanitize_filename(""), "file");
        assert_eq!(sanitize_filename(".bashrc"), "bashrc");
        assert_eq!(sanitize_filename("отчёт 2026.pdf"), "отчёт 2026.pdf");
    }
}
