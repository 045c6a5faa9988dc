//! A flamegraph SVG made fit to share the report's page with others: read as XML events
//! (quick-xml) and written back element by element, so that what is dropped is dropped whole
//! and text, already escaped by the writer that drew it, keeps its bytes.

use std::borrow::Cow;
use std::fmt::Write as _;

use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesCData, BytesStart, BytesText, Event};
use quick_xml::name::QName;
use quick_xml::{Reader, Writer};

/// A flamegraph SVG made fit to share a page: no XML prolog, no script, no event handler
/// attributes, and every id (and reference to one) prefixed. The SVG is read as XML events
/// (quick-xml) and written back element by element: what is dropped is dropped whole, and
/// text, already escaped by the writer that drew it, keeps its bytes. One that cannot be read
/// is replaced by an empty SVG, so that nothing half-read reaches the page.
pub fn inline_svg(svg: &str, prefix: &str) -> String {
    let scope = prefix.trim_end_matches('-');
    inlined(svg, scope, prefix).unwrap_or_else(|| {
        format!("<svg class=\"{scope}\" xmlns=\"http://www.w3.org/2000/svg\"></svg>")
    })
}

fn inlined(svg: &str, scope: &str, prefix: &str) -> Option<String> {
    let mut reader = Reader::from_str(svg);
    let mut w = Writer::new(Vec::with_capacity(svg.len()));
    let mut seen_svg = false;
    // Elements open inside a dropped element, and whether a `<style>` is open.
    let mut skipping = 0usize;
    let mut in_style = false;
    // Elements open in what was written: a document that ends with one open is cut short.
    let mut open = 0usize;
    loop {
        let event = reader.read_event().ok()?;
        if skipping > 0 {
            match event {
                Event::Start(_) => skipping += 1,
                Event::End(_) => skipping -= 1,
                Event::Eof => return None,
                _ => {}
            }
            continue;
        }
        let event = match event {
            Event::Eof if open == 0 && seen_svg => break,
            Event::Eof => return None,
            Event::Start(t) | Event::Empty(t) if !seen_svg && t.name().as_ref() != b"svg" => {
                continue;
            }
            // The prolog and anything else before the `<svg>` element.
            _ if !seen_svg && !matches!(&event, Event::Start(_) | Event::Empty(_)) => continue,
            Event::Start(t) if dropped_element(&t) => {
                skipping = 1;
                continue;
            }
            Event::Empty(t) if dropped_element(&t) => continue,
            Event::Start(t) => {
                in_style = t.name().as_ref() == b"style";
                open += 1;
                let first = !seen_svg;
                seen_svg = true;
                Event::Start(rewrite_tag(&t, prefix, first.then_some(scope))?)
            }
            Event::Empty(t) => {
                let first = !seen_svg;
                seen_svg = true;
                Event::Empty(rewrite_tag(&t, prefix, first.then_some(scope))?)
            }
            Event::End(t) => {
                in_style = false;
                open = open.checked_sub(1)?;
                Event::End(t)
            }
            Event::Text(t) if in_style => {
                let css = scope_styles(std::str::from_utf8(&t).ok()?, scope, prefix);
                Event::Text(BytesText::from_escaped(css))
            }
            Event::CData(c) if in_style => {
                let css = scope_styles(std::str::from_utf8(&c).ok()?, scope, prefix);
                Event::CData(BytesCData::new(css))
            }
            other => other,
        };
        w.write_event(event).ok()?;
    }
    String::from_utf8(w.into_inner()).ok()
}

/// Elements dropped whole, whatever their namespace prefix: scripts, and `foreignObject`,
/// which could carry HTML into the page (inferno draws none).
fn dropped_element(tag: &BytesStart<'_>) -> bool {
    let name = tag.local_name();
    let name = name.as_ref();
    name.eq_ignore_ascii_case(b"script") || name.eq_ignore_ascii_case(b"foreignObject")
}

/// Rewrites the rules of a `<style>` element's CSS so that they apply inside this SVG only
/// (they would otherwise restyle every SVG of the page) and name the prefixed ids.
fn scope_styles(css: &str, scope: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(css.len() + 256);
    for rule in css.split_inclusive('}') {
        match rule.split_once('{') {
            Some((selectors, body)) if !selectors.trim().is_empty() => {
                let scoped: Vec<String> = selectors
                    .split(',')
                    .map(|sel| {
                        format!(
                            ".{scope} {}",
                            sel.trim().replace('#', &format!("#{prefix}"))
                        )
                    })
                    .collect();
                let _ = write!(out, "\n{} {{{body}", scoped.join(", "));
            }
            _ => out.push_str(rule),
        }
    }
    out
}

/// The tag with its `on…` attributes (of any namespace) and `javascript:` values dropped, and `id="…"`, `url(#…)` and `href="#…"`
/// prefixed; the first `<svg>` gets the page's class for it first. Values stay as the writer
/// escaped them.
fn rewrite_tag(
    tag: &BytesStart<'_>,
    prefix: &str,
    class: Option<&str>,
) -> Option<BytesStart<'static>> {
    let name = std::str::from_utf8(tag.name().as_ref()).ok()?.to_string();
    let mut out = BytesStart::new(name);
    if let Some(class) = class {
        out.push_attribute(("class", class));
    }
    for attr in tag.attributes().with_checks(false) {
        let attr = attr.ok()?;
        let key = std::str::from_utf8(attr.key.as_ref()).ok()?;
        let local = attr.key.local_name();
        if local.as_ref().len() >= 2 && local.as_ref()[..2].eq_ignore_ascii_case(b"on") {
            continue;
        }
        let value = std::str::from_utf8(&attr.value).ok()?;
        // A link that would run a script (inferno writes none).
        if value
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("javascript:")
        {
            continue;
        }
        let value = match key {
            "id" => format!("{prefix}{value}"),
            "href" | "xlink:href" if value.starts_with('#') => format!("#{prefix}{}", &value[1..]),
            _ => value.replace("url(#", &format!("url(#{prefix}")),
        };
        out.push_attribute(Attribute {
            key: QName(attr.key.as_ref()),
            value: Cow::Owned(value.into_bytes()),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_scripts_handlers_and_script_links_are_dropped_too() {
        let svg = "<svg xmlns:svg=\"http://www.w3.org/2000/svg\" xmlns:ev=\"http://www.w3.org/2001/xml-events\"><svg:script>alert(1)</svg:script><foreignObject><p>x</p></foreignObject><g ev:onclick=\"alert(2)\"><a href=\" JavaScript:alert(3)\"><text>kept</text></a></g></svg>";
        let out = inline_svg(svg, "fg1-");
        for gone in ["alert(1)", "alert(2)", "alert(3)", "<p>", "foreignObject"] {
            assert!(!out.contains(gone), "{gone}: {out}");
        }
        assert!(out.contains("<a><text>kept</text></a>"), "{out}");
    }

    #[test]
    fn an_svg_that_cannot_be_read_is_inlined_as_an_empty_one() {
        for broken in [
            "<svg><g><title>x</title></svg>",
            "<svg onload=\"a\"><text>unclosed",
        ] {
            let out = inline_svg(broken, "fg3-");
            assert_eq!(
                out, "<svg class=\"fg3\" xmlns=\"http://www.w3.org/2000/svg\"></svg>",
                "{broken}"
            );
        }
    }

    #[test]
    fn inlined_flamegraphs_lose_scripts_and_handlers_and_keep_distinct_ids() {
        let svg = "<?xml version=\"1.0\"?><!DOCTYPE svg><svg onload=\"init(evt)\" viewBox=\"0 0 10 10\"><defs><linearGradient id=\"background\"/></defs><style type=\"text/css\">text { font-size:12px }\n#title, #search:hover { x: 1 }</style><script type=\"text/ecmascript\"><![CDATA[ var x = \"<svg>\"; ]]></script><rect fill=\"url(#background)\"/><g><title>&lt;script&gt;alert(1)&lt;/script&gt; (1 bytes)</title><text id=\"title\">t</text></g></svg>";
        let out = inline_svg(svg, "fg0-");
        assert!(out.starts_with("<svg class=\"fg0\" viewBox"), "{out}");
        assert!(!out.contains("script>"), "{out}");
        assert!(!out.contains("onload"), "{out}");
        assert!(out.contains("id=\"fg0-background\""), "{out}");
        assert!(out.contains("url(#fg0-background)"), "{out}");
        assert!(out.contains("&lt;script&gt;alert(1)"), "{out}");
        assert!(out.contains(".fg0 text {"), "{out}");
        assert!(
            out.contains(".fg0 #fg0-title, .fg0 #fg0-search:hover {"),
            "{out}"
        );
    }
}
