//! A small HTML builder whose only way to write markup is a `&'static str`: every string
//! that is not a literal in our source (ids, branch names, logins, paths, numbers) goes
//! through [`Html::text`], which escapes it. An unescaped submission string is a type error,
//! not a review finding.

/// HTML being built.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Html(String);

impl Html {
    pub fn new() -> Html {
        Html::default()
    }

    /// Markup we wrote: only literals.
    pub fn raw(&mut self, markup: &'static str) -> &mut Html {
        self.0.push_str(markup);
        self
    }

    /// Text from anywhere, escaped for element content and quoted attribute values; control
    /// characters (but newlines and tabs) become U+FFFD.
    pub fn text(&mut self, text: &str) -> &mut Html {
        for c in text.chars() {
            match c {
                '&' => self.0.push_str("&amp;"),
                '<' => self.0.push_str("&lt;"),
                '>' => self.0.push_str("&gt;"),
                '"' => self.0.push_str("&quot;"),
                '\'' => self.0.push_str("&#39;"),
                '\n' | '\t' => self.0.push(c),
                c if c.is_control() => self.0.push('\u{FFFD}'),
                c => self.0.push(c),
            }
        }
        self
    }

    /// A number or anything else `Display`, escaped like [`Html::text`].
    pub fn show(&mut self, value: impl std::fmt::Display) -> &mut Html {
        self.text(&value.to_string())
    }

    /// Another fragment built the same way.
    pub fn append(&mut self, other: &Html) -> &mut Html {
        self.0.push_str(&other.0);
        self
    }

    /// `<tag>text</tag>` for a literal tag.
    pub fn el(&mut self, open: &'static str, text: &str, close: &'static str) -> &mut Html {
        self.raw(open).text(text).raw(close)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// A whole page: the document around `body`, with the page's own style sheet (no external
/// resources of any kind: no scripts, fonts, images or style sheets from elsewhere).
pub fn page(title: &str, body: &Html) -> String {
    let mut h = Html::new();
    h.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<meta name=\"referrer\" content=\"no-referrer\">")
        .el("<title>", title, "</title>")
        .raw("<style>")
        .raw(STYLE)
        .raw("</style></head><body><header><a href=\"/dashboard\">InfraDev</a></header><main>")
        .append(body)
        .raw("</main></body></html>\n");
    h.into_string()
}

const STYLE: &str = "\
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:0;color:#1f2328;background:#fff;font-size:14px}\
header{background:#24292f;padding:10px 24px}header a{color:#fff;font-weight:bold;text-decoration:none}\
main{padding:16px 24px;max-width:1200px}h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}\
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}\
th{background:#f6f8fa}td.n{text-align:right}code,pre{font-family:DejaVu Sans Mono,monospace;font-size:12px}\
pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap}\
.verdict{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:bold}\
.resolved{background:#1a7f37}.unresolved{background:#cf222e}.tampered{background:#8250df}.error{background:#6e7781}.pending{background:#9a6700}\
.note{color:#57606a}.charts{display:flex;flex-wrap:wrap;gap:16px}.charts figure{margin:0}\
figcaption{font-weight:bold;margin-bottom:4px}form input{margin:4px}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_markup_is_literal() {
        let mut h = Html::new();
        h.raw("<p title=\"")
            .text("\"><script>alert('x')</script>&\u{1b}\n")
            .raw("\">");
        assert_eq!(
            h.as_str(),
            "<p title=\"&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;\u{FFFD}\n\">"
        );
        let doc = page("<t>", &h);
        assert!(doc.contains("<title>&lt;t&gt;</title>"));
        assert!(!doc.contains("src="), "nothing is loaded from anywhere");
    }
}
