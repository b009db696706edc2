//! From a fetched page to compact text: markup too deep or too large to
//! convert safely measured first, the rest converted on a bounded pool of
//! threads with their own stacks.

/// Elements whose text is not page content.
pub(super) const HIDDEN_CSS: &str = "script, style, noscript, template, nav, header, footer, aside, form, button, svg, iframe { display: none; }";

/// Conversions to text that may run at once (see [`Webfetch::convert`]).
pub(super) const CONVERTERS: usize = 2;

/// The converter thread's stack: html2text recurses on some nestings.
pub(super) const CONVERTER_STACK: usize = 32 * 1024 * 1024;

/// HTML nested deeper than this is not laid out (html5ever's tree building
/// is quadratic in the nesting depth); its tags are stripped instead.
pub const MAX_HTML_DEPTH: usize = 512;

/// HTML with more elements than this is not laid out either: the layout
/// holds about 2 KB per element (100,000 tiny elements took 220 MB).
pub const MAX_HTML_ELEMENTS: usize = 50_000;

/// How big a parser would find HTML: elements and nesting depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Start tags that open an element (not void, not self-closed).
    pub elements: usize,
    /// How deep they nest, estimated from above.
    pub depth: usize,
}

/// Elements that hold nothing, or that the next of their kind closes: they
/// never add depth.
pub(super) const FLAT: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "li", "p", "td", "th", "tr", "option", "dt", "dd", "html", "head", "body",
];

/// Elements an end tag cannot close past (HTML's scope boundaries).
pub(super) const BOUNDARIES: &[&str] = &[
    "table", "caption", "template", "applet", "object", "marquee", "svg", "math", "select",
];

/// How far down the open elements an end tag looks for its start.
pub(super) const END_TAG_REACH: usize = 16;

/// The shape of HTML in one pass, erring high: an end tag closes only an
/// element open near the top and not behind a scope boundary (a parser
/// ignores the others, so `<div></x>` repeated nests as deep as it is long).
pub fn markup_shape(html: &str) -> Shape {
    let mut open: Vec<String> = Vec::new();
    let mut shape = Shape {
        elements: 0,
        depth: 0,
    };
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let closing = rest.starts_with('/');
        let name: String = rest
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .take(16)
            .collect::<String>()
            .to_ascii_lowercase();
        if name.is_empty() || FLAT.contains(&name.as_str()) {
            continue;
        }
        if closing {
            close(&mut open, &name);
            continue;
        }
        // The tag runs to its `>`; looking no further than the next `<`
        // keeps the scan linear on unclosed tags.
        let self_closed = rest
            .find(['<', '>'])
            .is_some_and(|end| rest[end..].starts_with('>') && rest[..end].ends_with('/'));
        if !self_closed {
            open.push(name);
            shape.elements += 1;
            shape.depth = shape.depth.max(open.len());
        }
    }
    shape
}

/// `</name>`: pops down to the nearest open `name`, if it is within reach
/// and no scope boundary stands above it.
pub(super) fn close(open: &mut Vec<String>, name: &str) {
    for (k, el) in open.iter().enumerate().rev().take(END_TAG_REACH) {
        if el == name {
            open.truncate(k);
            return;
        }
        if BOUNDARIES.contains(&el.as_str()) {
            return;
        }
    }
}

/// The text of HTML with every tag removed, scripts and styles with their
/// content: the fallback for markup too deep or too big to lay out.
pub(super) fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let lower = rest
            .get(..8)
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        let skip_to = if lower.starts_with("<script") {
            Some("</script")
        } else if lower.starts_with("<style") {
            Some("</style")
        } else {
            None
        };
        if let Some(end) = skip_to {
            // Raw text runs to its end tag, whatever it holds.
            rest = find_ascii_ci(rest, end).map_or("", |k| &rest[k + end.len()..]);
        }
        match rest.find('>') {
            Some(k) => {
                rest = &rest[k + 1..];
                out.push(' ');
            }
            None => rest = "",
        }
    }
    out.push_str(rest);
    let words: Vec<&str> = out.split_whitespace().collect();
    words.join(" ")
}

/// Where `needle` (ASCII, lower case) first occurs in `hay`, ignoring case.
pub(super) fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    hay.as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Readable text from HTML: content kept, scripts, styles and page chrome
/// dropped, links listed compactly at the end.
pub fn html_to_text(html: &str) -> String {
    let config = html2text::config::plain().add_css(HIDDEN_CSS);
    let text = match config {
        Ok(c) => c.string_from_read(html.as_bytes(), 120),
        Err(_) => html2text::config::plain().string_from_read(html.as_bytes(), 120),
    };
    let text = text.unwrap_or_default();
    // Collapse runs of blank lines: a small context has no room for them.
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}
