//! Flamegraphs as SVG, drawn by inferno: the stacks of one profile, and the difference between
//! two sets of stacks. Pure: folded stacks in, deterministic SVG text out (colours come from a
//! hash of the function name, never from a random number), every name escaped by the writer.

use std::collections::{BTreeMap, HashMap};
use std::iter;

use inferno::flamegraph::{self, Options, Palette, color};
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::{Reader, Writer};
use thiserror::Error;

use crate::units;

/// What a flamegraph is titled and what its widths count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlameOptions {
    pub title: String,
    pub subtitle: Option<String>,
    /// What the widths count: `bytes` or `goroutines`; tooltips read "N bytes".
    pub count_name: String,
}

#[derive(Debug, Error)]
pub enum FlameError {
    #[error("inferno could not draw the flamegraph: {0}")]
    Render(std::io::Error),
    #[error("inferno wrote a flamegraph that is not UTF-8")]
    NotUtf8,
    #[error("inferno's flamegraph could not be read back as XML: {0}")]
    Rewrite(String),
}

/// Widths beyond this are scaled down (and inferno's `factor` scales the figures back up):
/// inferno adds widths in a `u64` and colours differences with `isize` arithmetic that would
/// overflow near `i64::MAX`.
const MAX_TOTAL_WIDTH: u128 = 1 << 48;

/// Folded stacks "root;…;leaf" with values → SVG text. Deterministic output.
///
/// Stacks that appear more than once are added up; stacks whose value is not positive are left
/// out (a width cannot be negative). With nothing left to draw the SVG says so.
pub fn flame_svg(folded: &[(String, i64)], options: &FlameOptions) -> Result<String, FlameError> {
    let stacks: Vec<(String, u64)> = merge(folded)
        .into_iter()
        .filter_map(|(stack, v)| u64::try_from(v).ok().filter(|&v| v > 0).map(|v| (stack, v)))
        .collect();
    if stacks.is_empty() {
        return empty_svg(options, "Nothing to draw: no stack has a positive value.");
    }
    let divisor = divisor(stacks.iter().map(|(_, v)| *v));
    let lines: Vec<String> = stacks
        .iter()
        .filter(|(_, v)| v / divisor > 0)
        .map(|(stack, v)| format!("{stack} {}", v / divisor))
        .collect();
    let mut opt = inferno_options(options, divisor);
    opt.colors = Palette::Basic(color::BasicPalette::Mem);
    render(&mut opt, &lines)
}

/// A differential flamegraph between two folded sets keyed by name; sites that shrank must
/// stay visible.
///
/// Inferno draws widths from one side only and cannot draw a negative width: fed "before after"
/// pairs it sizes frames by `after` and colours them by `after − before`, so a stack that
/// vanished from `new` would get no width at all. Here every stack is drawn as wide as the
/// larger of its two values, and coloured by `new − base`: red grew, blue shrank, the stronger
/// the larger the change, near-white unchanged. A stack only in `base` keeps its base width
/// and comes out blue; one only in `new` comes out red. (Inferno colours each frame by the
/// change of the stack that ends there, so inner frames stay pale.) Because a width is then
/// neither side's figure, every tooltip is rewritten to give both sides and the change, summed
/// over the stacks under that frame.
pub fn diff_flame_svg(
    base: &[(String, i64)],
    new: &[(String, i64)],
    options: &FlameOptions,
) -> Result<String, FlameError> {
    let mut pairs: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (stack, v) in merge(base) {
        pairs.entry(stack).or_default().0 = v.max(0);
    }
    for (stack, v) in merge(new) {
        pairs.entry(stack).or_default().1 = v.max(0);
    }
    pairs.retain(|_, (b, n)| *b > 0 || *n > 0);

    let legend = "widths: larger of base, new · red grew, blue shrank";
    let mut options = options.clone();
    options.subtitle = Some(match options.subtitle.take() {
        Some(s) if !s.is_empty() => format!("{s} · {legend}"),
        _ => legend.to_string(),
    });
    if pairs.is_empty() {
        return empty_svg(&options, "Nothing to draw: both sides are empty.");
    }

    let divisor = divisor(pairs.values().map(|&(b, n)| b.max(n) as u64));
    let mut lines: Vec<DiffLine> = pairs
        .into_iter()
        .filter_map(|(stack, (base, new))| {
            let (b, n) = (base as u64 / divisor, new as u64 / divisor);
            let width = b.max(n);
            // Inferno reads "stack before after": width `after`, colour `after − before`.
            // With after = max(b, n), before = after − (n − b) is never negative.
            let before = width + b - n;
            (width > 0).then(|| DiffLine {
                text: format!("{stack} {before} {width}"),
                stack_len: stack.len(),
                width,
                base,
                new,
            })
        })
        .collect();
    // Sorted here, as inferno would sort them, so that the layout below is inferno's.
    lines.sort_by(|a, b| a.text.cmp(&b.text));
    let figures = frame_figures(&lines);

    let mut opt = inferno_options(&options, divisor);
    opt.bgcolors = Some(color::BackgroundColor::Grey);
    opt.no_sort = true;
    let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
    let svg = render_lines(&mut opt, &texts)?;
    retitle(&svg, &figures, &options.count_name)
}

/// Adds up repeated stacks and makes each one safe to hand to inferno, whose folded format
/// reads a line as `frame;frame;… count`.
fn merge(folded: &[(String, i64)]) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for (stack, v) in folded {
        let total = out.entry(clean_stack(stack)).or_insert(0);
        *total = total.saturating_add(*v);
    }
    out
}

/// Control characters would break lines and surrounding blanks are trimmed by inferno anyway;
/// an empty frame gets a name, and a stack starting "# " would be read as a comment.
fn clean_stack(stack: &str) -> String {
    let mut out = String::with_capacity(stack.len());
    for (i, frame) in stack.split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        let frame: String = frame
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let frame = frame.trim();
        match frame {
            "" => out.push_str("(unnamed)"),
            f if i == 0 && f.starts_with("# ") => {
                out.push('#');
                out.push_str(f[2..].trim_start());
            }
            f => out.push_str(f),
        }
    }
    out
}

/// What every width is divided by so that their sum stays below [`MAX_TOTAL_WIDTH`].
fn divisor(widths: impl Iterator<Item = u64>) -> u64 {
    let total: u128 = widths.map(u128::from).sum();
    if total <= MAX_TOTAL_WIDTH {
        1
    } else {
        total.div_ceil(MAX_TOTAL_WIDTH) as u64
    }
}

fn inferno_options(options: &FlameOptions, divisor: u64) -> Options<'static> {
    let mut opt = Options::default();
    opt.title = options.title.clone();
    opt.subtitle = options.subtitle.clone().filter(|s| !s.is_empty());
    opt.count_name = if options.count_name.is_empty() {
        "samples".to_string()
    } else {
        options.count_name.clone()
    };
    opt.deterministic = true;
    opt.factor = divisor as f64;
    opt
}

fn render(opt: &mut Options<'_>, lines: &[String]) -> Result<String, FlameError> {
    let texts: Vec<&str> = lines.iter().map(String::as_str).collect();
    render_lines(opt, &texts)
}

fn render_lines(opt: &mut Options<'_>, lines: &[&str]) -> Result<String, FlameError> {
    let mut out = Vec::new();
    flamegraph::from_lines(opt, lines.iter().copied(), &mut out).map_err(FlameError::Render)?;
    String::from_utf8(out).map_err(|_| FlameError::NotUtf8)
}

struct DiffLine {
    /// The line inferno reads: `stack before after`.
    text: String,
    stack_len: usize,
    /// Inferno's width (scaled).
    width: u64,
    base: i64,
    new: i64,
}

impl DiffLine {
    fn stack(&self) -> &str {
        &self.text[..self.stack_len]
    }
}

/// Base and new sums of every frame inferno will draw, keyed by the frame's start and width
/// (its `fg:x` and `fg:w`). Follows inferno's layout: lines in order, each line's frames
/// merged with the previous line's common prefix under an unnamed root. Two frames with the
/// same start and width cover the same lines (every line is at least 1 wide), so the key
/// names one set of figures even where a frame sits on a parent of the same extent.
fn frame_figures(lines: &[DiffLine]) -> HashMap<(u64, u64), (i64, i64)> {
    struct Open<'a> {
        name: &'a str,
        start: u64,
        base: i64,
        new: i64,
    }
    let mut figures = HashMap::new();
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut time = 0u64;
    let mut close = |open: &mut Vec<Open<'_>>, keep: usize, time: u64| {
        for f in open.drain(keep..) {
            figures.insert((f.start, time - f.start), (f.base, f.new));
        }
    };
    for line in lines {
        let names: Vec<&str> = iter::once("").chain(line.stack().split(';')).collect();
        let shared = open
            .iter()
            .zip(&names)
            .take_while(|(o, n)| o.name == **n)
            .count();
        close(&mut open, shared, time);
        open.extend(names[shared..].iter().map(|name| Open {
            name,
            start: time,
            base: 0,
            new: 0,
        }));
        for f in &mut open {
            f.base = f.base.saturating_add(line.base);
            f.new = f.new.saturating_add(line.new);
        }
        time += line.width;
    }
    close(&mut open, 0, time);
    figures
}

/// Replaces inferno's tooltip figures ("N bytes, P%; +D%", where N is the drawn width) with
/// both sides and the change. The SVG is read as XML events and written back event by event,
/// so everything but a frame's tooltip text keeps its bytes, and the escaped name inferno
/// wrote is kept as it is. A frame's `<title>` comes before the `<rect>` that says where the
/// frame is (`fg:x`, `fg:w`), so its text is held until that rect is read.
fn retitle(
    svg: &str,
    figures: &HashMap<(u64, u64), (i64, i64)>,
    count_name: &str,
) -> Result<String, FlameError> {
    let mut reader = Reader::from_str(svg);
    let mut writer = Writer::new(Vec::with_capacity(svg.len() + svg.len() / 8));
    // The escaped text of the title being read, then of the title read and not yet written.
    let mut title: Option<String> = None;
    let mut title_end: Option<Event<'_>> = None;
    let rewrite = |e: quick_xml::Error| FlameError::Rewrite(e.to_string());
    loop {
        let event = reader.read_event().map_err(rewrite)?;
        match (&event, title_end.is_some()) {
            (Event::Eof, _) => break,
            (Event::Start(t), false) if t.name().as_ref() == b"title" => {
                title = Some(String::new());
            }
            (Event::Text(t), false) if title.is_some() => {
                let raw = std::str::from_utf8(t).map_err(|_| FlameError::NotUtf8)?;
                title.get_or_insert_default().push_str(raw);
                continue;
            }
            (Event::GeneralRef(r), false) if title.is_some() => {
                let raw = std::str::from_utf8(r).map_err(|_| FlameError::NotUtf8)?;
                let text = title.get_or_insert_default();
                text.push('&');
                text.push_str(raw);
                text.push(';');
                continue;
            }
            (Event::End(t), false) if title.is_some() && t.name().as_ref() == b"title" => {
                title_end = Some(event.into_owned());
                continue;
            }
            (_, true) => {
                let text = title.take().unwrap_or_default();
                let frame = match &event {
                    Event::Empty(rect) | Event::Start(rect) if rect.name().as_ref() == b"rect" => {
                        attribute(rect, "fg:x")
                            .zip(attribute(rect, "fg:w"))
                            .and_then(|k| figures.get(&k))
                    }
                    _ => None,
                };
                let text = match (frame, text.rfind(" (")) {
                    (Some(&(base, new)), Some(cut)) => {
                        format!("{} ({})", &text[..cut], change_text(base, new, count_name))
                    }
                    _ => text,
                };
                let io = |e: std::io::Error| FlameError::Render(e);
                writer
                    .write_event(Event::Text(BytesText::from_escaped(text)))
                    .map_err(io)?;
                if let Some(end) = title_end.take() {
                    writer.write_event(end).map_err(io)?;
                }
            }
            _ => {}
        }
        writer.write_event(event).map_err(FlameError::Render)?;
    }
    String::from_utf8(writer.into_inner()).map_err(|_| FlameError::NotUtf8)
}

/// An attribute of a tag as a number (`fg:x="120"`).
fn attribute(tag: &BytesStart<'_>, name: &str) -> Option<u64> {
    let value = tag.try_get_attribute(name).ok()??.value;
    std::str::from_utf8(&value).ok()?.parse().ok()
}

/// "base 2.00 MiB, new 26.0 MiB, +24.0 MiB" or "base 8, new 158 goroutines, +150".
fn change_text(base: i64, new: i64, count_name: &str) -> String {
    let amount = |v: i64| {
        if count_name == "bytes" {
            units::format_bytes(v)
        } else {
            units::group_thousands(v)
        }
    };
    let delta = new.saturating_sub(base);
    let unit = if count_name == "bytes" || count_name.is_empty() {
        String::new()
    } else {
        format!(" {count_name}")
    };
    let change = match delta {
        0 => "unchanged".to_string(),
        d if d > 0 => format!("+{}", amount(d)),
        d => format!("-{}", amount(d.saturating_abs())),
    };
    format!("base {}, new {}{unit}, {change}", amount(base), amount(new))
}

/// A small SVG with the title, the subtitle and a message, for a graph with no frames
/// (inferno refuses to draw one). Written by quick-xml, which escapes every text it is given.
fn empty_svg(options: &FlameOptions, message: &str) -> Result<String, FlameError> {
    let mut w = Writer::new(Vec::new());
    let newline =
        |w: &mut Writer<Vec<u8>>| w.write_event(Event::Text(BytesText::from_escaped("\n")));
    let centred = |w: &mut Writer<Vec<u8>>, y: &str, size: &str, text: &str| {
        // XML 1.0 has no place for control characters but these two.
        let text: String = text
            .chars()
            .map(|c| {
                if c.is_control() && c != '\n' && c != '\t' {
                    ' '
                } else {
                    c
                }
            })
            .collect();
        w.create_element("text")
            .with_attributes([
                ("x", "50%"),
                ("y", y),
                ("text-anchor", "middle"),
                ("font-family", "Verdana"),
                ("font-size", size),
            ])
            .write_text_content(BytesText::new(&text))?;
        newline(w)
    };
    let mut draw = || -> std::io::Result<()> {
        w.write_event(Event::Decl(BytesDecl::new("1.0", None, Some("no"))))?;
        newline(&mut w)?;
        w.write_event(Event::Start(BytesStart::new("svg").with_attributes([
            ("version", "1.1"),
            ("width", "1200"),
            ("height", "110"),
            ("viewBox", "0 0 1200 110"),
            ("xmlns", "http://www.w3.org/2000/svg"),
        ])))?;
        newline(&mut w)?;
        w.create_element("rect")
            .with_attributes([
                ("x", "0"),
                ("y", "0"),
                ("width", "100%"),
                ("height", "110"),
                ("fill", "#f8f8f8"),
            ])
            .write_empty()?;
        newline(&mut w)?;
        centred(&mut w, "24", "17px", &options.title)?;
        if let Some(subtitle) = options.subtitle.as_deref().filter(|s| !s.is_empty()) {
            centred(&mut w, "48", "12px", subtitle)?;
        }
        centred(&mut w, "84", "12px", message)?;
        w.write_event(Event::End(BytesEnd::new("svg")))?;
        newline(&mut w)
    };
    draw().map_err(FlameError::Render)?;
    String::from_utf8(w.into_inner()).map_err(|_| FlameError::NotUtf8)
}

#[cfg(test)]
mod tests;
