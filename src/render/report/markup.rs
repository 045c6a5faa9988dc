//! HTML whose text is escaped by construction. [`html!`](crate::html) and
//! [`markup!`](crate::markup) format like `write!` and `format!`, but every argument goes
//! through [`ToHtml`]: text (`str`, `String`) is always escaped, numbers are written as they
//! are (with their format spec), and only a [`Markup`], HTML built by these macros, goes in as
//! it is. Text reaches the page no other way: the format string is a literal, and the only
//! names it captures itself are constants (`{STYLE}`, `{WIDTH}`); a test holds every use of
//! the macros to that.

use std::fmt;

/// HTML built by [`markup!`](crate::markup): its text already escaped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Markup(String);

impl Markup {
    /// Wraps what `format!` made of [`Html`] arguments; only the macros call it.
    #[doc(hidden)]
    pub fn built(html: String) -> Markup {
        Markup(html)
    }

    /// Markup written in this crate's source: tags and entities, no text from a run.
    pub fn literal(html: &'static str) -> Markup {
        Markup(html.to_string())
    }

    /// Markup drawn by another writer of this crate that escapes its own text: the charts'
    /// SVG (plotters), the flamegraphs (inferno, through
    /// `inline::inline_svg`).
    pub fn drawn(svg: String) -> Markup {
        Markup(svg)
    }

    /// A value as JSON for a `<script type="application/json">` block: serde's JSON, with
    /// `<`, `>` and `&` inside strings written as `\u003c`, `\u003e`, `\u0026` (JSON's own
    /// escapes, which `JSON.parse` reads back), so no text can end the block or open a comment.
    /// Outside strings JSON has none of them.
    pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Markup {
        let mut bytes = Vec::new();
        let mut writer = serde_json::Serializer::with_formatter(&mut bytes, ScriptSafe);
        // Serialising plain data into memory: the only failure would be a map with keys that
        // are not strings, which no type here has.
        if value.serialize(&mut writer).is_err() {
            return Markup(String::from("null"));
        }
        Markup(String::from_utf8(bytes).unwrap_or_else(|_| String::from("null")))
    }

    /// Pieces of markup joined by a separator (itself markup).
    pub fn join(parts: &[Markup], separator: &'static str) -> Markup {
        let parts: Vec<&str> = parts.iter().map(|m| m.0.as_str()).collect();
        Markup(parts.join(separator))
    }

    /// Appends more markup.
    pub fn push(&mut self, more: &Markup) {
        self.0.push_str(&more.0);
    }

    pub fn into_string(self) -> String {
        self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// serde_json's compact format, but for the characters that mean something to an HTML parser
/// inside a `<script>` element, which it escapes wherever a string holds them.
struct ScriptSafe;

impl serde_json::ser::Formatter for ScriptSafe {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(['<', '>', '&']) {
            writer.write_all(&rest.as_bytes()[..at])?;
            writer.write_all(match rest.as_bytes()[at] {
                b'<' => b"\\u003c",
                b'>' => b"\\u003e",
                _ => b"\\u0026",
            })?;
            rest = &rest[at + 1..];
        }
        writer.write_all(rest.as_bytes())
    }
}

/// How a value goes into HTML.
pub trait ToHtml {
    fn fmt_html(&self, f: &mut fmt::Formatter) -> fmt::Result;
}

impl ToHtml for str {
    fn fmt_html(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut rest = self;
        while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..at])?;
            f.write_str(match rest.as_bytes()[at] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[at + 1..];
        }
        f.write_str(rest)
    }
}

impl ToHtml for String {
    fn fmt_html(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.as_str().fmt_html(f)
    }
}

impl ToHtml for Markup {
    fn fmt_html(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<T: ToHtml + ?Sized> ToHtml for &T {
    fn fmt_html(&self, f: &mut fmt::Formatter) -> fmt::Result {
        (**self).fmt_html(f)
    }
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl ToHtml for $t {
            fn fmt_html(&self, f: &mut fmt::Formatter) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }
    )*};
}
numbers!(u8, u16, u32, u64, usize, i32, i64, f64);

/// One argument of the macros: shown through [`ToHtml`].
#[doc(hidden)]
pub struct Html<'a, T: ?Sized>(pub &'a T);

impl<T: ToHtml + ?Sized> fmt::Display for Html<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.fmt_html(f)
    }
}

/// `write!` for HTML: every argument escaped unless it is [`Markup`].
#[macro_export]
macro_rules! html {
    ($out:expr, $fmt:literal $(, $arg:expr)* $(,)?) => {{
        use ::std::fmt::Write as _;
        let _ = ::std::write!($out, $fmt $(, $crate::render::report::markup::Html(&$arg))*);
    }};
}

/// `writeln!` for HTML.
#[macro_export]
macro_rules! htmlln {
    ($out:expr, $fmt:literal $(, $arg:expr)* $(,)?) => {{
        use ::std::fmt::Write as _;
        let _ = ::std::writeln!($out, $fmt $(, $crate::render::report::markup::Html(&$arg))*);
    }};
}

/// `format!` for HTML: a [`Markup`].
#[macro_export]
macro_rules! markup {
    ($fmt:literal $(, $arg:expr)* $(,)?) => {
        $crate::render::report::markup::Markup::built(::std::format!(
            $fmt $(, $crate::render::report::markup::Html(&$arg))*
        ))
    };
}

#[cfg(test)]
mod tests {

    #[test]
    fn text_is_escaped_numbers_keep_their_format_and_markup_stays() {
        let inner = markup!("<code>{}</code>", "a<b & 'c'");
        assert_eq!(inner.as_str(), "<code>a&lt;b &amp; &#39;c&#39;</code>");
        let mut out = String::new();
        htmlln!(out, "<p title=\"{}\">{:.1} {}</p>", "\"x\"", 2.26f64, inner);
        assert_eq!(
            out,
            "<p title=\"&quot;x&quot;\">2.3 <code>a&lt;b &amp; &#39;c&#39;</code></p>\n"
        );
    }

    #[test]
    fn json_for_a_data_block_cannot_end_it() {
        let name = "</script><script>alert(1)</script><!-- & \"q\"";
        let block = super::Markup::json(&serde_json::json!({ "frames": [name], name: 1 }));
        let text = block.as_str();
        assert!(
            !text.contains('<') && !text.contains('>') && !text.contains('&'),
            "{text}"
        );
        let back: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(back["frames"][0], name);
        assert_eq!(back[name], 1);
    }

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            markup!("{}", "<script>alert('x')</script> & \"y\"").as_str(),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
    }

    /// A `{name}` inside the format string is formatted by `format_args!` itself, around
    /// [`Html`](super::Html): only constants (ALL_CAPS, written in this crate) may be named so.
    #[test]
    fn the_macros_name_no_variable_in_their_format_strings() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![root.clone()];
        let mut found = Vec::new();
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for name in ["html!(", "htmlln!(", "markup!("] {
                for (at, _) in text.match_indices(name) {
                    // The first string literal after the macro's name is its format string.
                    let rest = &text[at + name.len()..];
                    let Some(open) = rest.find('"') else { continue };
                    let mut literal = String::new();
                    let mut chars = rest[open + 1..].chars();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => {
                                chars.next();
                            }
                            '"' => break,
                            c => literal.push(c),
                        }
                    }
                    let mut pieces = literal.split('{');
                    pieces.next();
                    for piece in pieces {
                        let inside = piece.split('}').next().unwrap_or("");
                        let ident = inside.split(':').next().unwrap_or("");
                        let variable = ident
                            .starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                            && ident.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                        if variable {
                            let line = text[..at].lines().count() + 1;
                            found.push(format!("{}:{line}: {{{ident}}}", path.display()));
                        }
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "variables named inside a format string: {found:#?}"
        );
    }
}
