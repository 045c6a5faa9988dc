//! Flamegraphs as SVG, drawn by inferno: the stacks of one profile, and the difference between
//! two sets of stacks. Pure: folded stacks in, deterministic SVG text out (colours come from a
//! hash of the function name, never from a random number), every name escaped by the writer.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::iter;

use inferno::flamegraph::{self, Options, Palette, color};
use thiserror::Error;

use crate::model::Profile;
use crate::model::aggregate::{self, Granularity};
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
}

/// Widths beyond this are scaled down (and inferno's `factor` scales the figures back up):
/// inferno adds widths in a `u64` and colours differences with `isize` arithmetic that would
/// overflow near `i64::MAX`.
const MAX_TOTAL_WIDTH: u128 = 1 << 48;

/// Stands in for a stack without frames, which folded text cannot spell.
const EMPTY_STACK: &str = "(no frames)";

/// Folded stacks of one sample type of a profile (function granularity), root first and
/// `;`-separated, sorted by stack. A `;` inside a function name becomes `:` so that it cannot
/// split a frame. An out-of-range sample index gives no stacks.
pub fn folded(profile: &Profile, sample_index: usize) -> Vec<(String, i64)> {
    if sample_index >= profile.sample_types.len() {
        return Vec::new();
    }
    let mut stacks: BTreeMap<String, i64> = BTreeMap::new();
    for stack in aggregate::stacks(profile, sample_index, Granularity::Function) {
        let mut line = String::new();
        for (i, name) in stack.frames.iter().rev().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.extend(name.chars().map(|c| if c == ';' { ':' } else { c }));
        }
        if line.is_empty() {
            line.push_str(EMPTY_STACK);
        }
        let total = stacks.entry(line).or_insert(0);
        *total = total.saturating_add(stack.value);
    }
    stacks.into_iter().collect()
}

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
        return Ok(empty_svg(
            options,
            "Nothing to draw: no stack has a positive value.",
        ));
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
        return Ok(empty_svg(
            &options,
            "Nothing to draw: both sides are empty.",
        ));
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
    Ok(retitle(&svg, &figures, &options.count_name))
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
/// both sides and the change. The escaped name inferno wrote is kept as it is.
fn retitle(svg: &str, figures: &HashMap<(u64, u64), (i64, i64)>, count_name: &str) -> String {
    const OPEN: &str = "<g><title>";
    const CLOSE: &str = "</title>";
    let mut out = String::with_capacity(svg.len() + svg.len() / 8);
    let mut rest = svg;
    while let Some(at) = rest.find(OPEN) {
        let (head, tail) = rest.split_at(at + OPEN.len());
        out.push_str(head);
        let Some(end) = tail.find(CLOSE) else {
            rest = tail;
            break;
        };
        let title = &tail[..end];
        let after = &tail[end..];
        let rect = after.find("/>").map_or("", |e| &after[..e]);
        let key = attribute(rect, "fg:x").zip(attribute(rect, "fg:w"));
        match (key.and_then(|k| figures.get(&k)), title.rfind(" (")) {
            (Some(&(base, new)), Some(cut)) => {
                out.push_str(&title[..cut]);
                out.push_str(" (");
                out.push_str(&change_text(base, new, count_name));
                out.push(')');
            }
            _ => out.push_str(title),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

fn attribute(tag: &str, name: &str) -> Option<u64> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    tag[start..start + len].parse().ok()
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
/// (inferno refuses to draw one).
fn empty_svg(options: &FlameOptions, message: &str) -> String {
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"110\" viewBox=\"0 0 1200 110\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n\
         <rect x=\"0\" y=\"0\" width=\"100%\" height=\"110\" fill=\"#f8f8f8\"/>\n\
         <text x=\"50%\" y=\"24\" text-anchor=\"middle\" font-family=\"Verdana\" \
         font-size=\"17px\">{}</text>\n",
        escape(&options.title)
    );
    if let Some(subtitle) = options.subtitle.as_deref().filter(|s| !s.is_empty()) {
        let _ = writeln!(
            svg,
            "<text x=\"50%\" y=\"48\" text-anchor=\"middle\" font-family=\"Verdana\" \
             font-size=\"12px\">{}</text>",
            escape(subtitle)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"50%\" y=\"84\" text-anchor=\"middle\" font-family=\"Verdana\" \
         font-size=\"12px\">{}</text>\n</svg>\n",
        escape(message)
    );
    svg
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::analyse::diff::testing::arb_profile;

    fn opts() -> FlameOptions {
        FlameOptions {
            title: "Heap in use".into(),
            subtitle: Some("a test".into()),
            count_name: "bytes".into(),
        }
    }

    fn stacks(items: &[(&str, i64)]) -> Vec<(String, i64)> {
        items.iter().map(|(s, v)| (s.to_string(), *v)).collect()
    }

    /// The tooltip texts of every frame, in order.
    fn titles(svg: &str) -> Vec<String> {
        svg.split("<title>")
            .skip(1)
            .map(|t| t[..t.find("</title>").unwrap()].to_string())
            .collect()
    }

    #[test]
    fn the_same_stacks_draw_the_same_svg() {
        let input = stacks(&[
            ("main.main;main.load", 3 << 20),
            ("main.main;main.serve", 1 << 20),
        ]);
        let a = flame_svg(&input, &opts()).unwrap();
        let mut reversed = input.clone();
        reversed.reverse();
        assert_eq!(a, flame_svg(&reversed, &opts()).unwrap());
        assert!(a.contains("main.load (3,145,728 bytes, 75.00%)"), "{a}");
    }

    #[test]
    fn markup_in_names_and_titles_is_escaped() {
        let evil = "<script>alert(1)</script>";
        let input = stacks(&[(&format!("main.main;{evil}"), 100)]);
        let options = FlameOptions {
            title: format!("title {evil}"),
            subtitle: Some(format!("sub {evil}")),
            count_name: "bytes".into(),
        };
        for svg in [
            flame_svg(&input, &options).unwrap(),
            diff_flame_svg(&[], &input, &options).unwrap(),
            flame_svg(&[], &options).unwrap(),
        ] {
            assert!(!svg.contains("<script>alert"), "{svg}");
            assert!(!svg.contains("alert(1)</script>"), "{svg}");
        }
        let svg = flame_svg(&input, &options).unwrap();
        assert!(
            svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{svg}"
        );
    }

    #[test]
    fn values_that_are_not_positive_are_left_out() {
        let input = stacks(&[("a;b", 10), ("a;c", -5), ("a;d", 0), ("a;b", 2)]);
        let svg = flame_svg(&input, &opts()).unwrap();
        let t = titles(&svg);
        assert!(t.iter().any(|t| t.starts_with("b (12 bytes")), "{t:?}");
        assert!(!t.iter().any(|t| t.starts_with("c ") || t.starts_with("d ")));
    }

    #[test]
    fn nothing_to_draw_is_a_valid_svg_that_says_so() {
        let svg = flame_svg(&stacks(&[("a", -1)]), &opts()).unwrap();
        assert!(svg.starts_with("<?xml") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("Nothing to draw"));
        assert!(svg.contains("Heap in use"));
    }

    #[test]
    fn names_that_would_break_the_folded_format_are_cleaned() {
        assert_eq!(clean_stack("a;\tb\n;;c "), "a;b;(unnamed);c");
        assert_eq!(clean_stack("# not a comment;x"), "#not a comment;x");
        let svg = flame_svg(&stacks(&[("# x;y", 5)]), &opts()).unwrap();
        assert!(titles(&svg).iter().any(|t| t.starts_with("y (5 bytes")));
    }

    #[test]
    fn huge_values_are_scaled_but_shown_at_their_size() {
        let big = i64::MAX / 2;
        let input = stacks(&[("a;main.b", big), ("a;main.c", big), ("a;main.d", big)]);
        let svg = flame_svg(&input, &opts()).unwrap();
        assert!(titles(&svg).iter().any(|t| t.starts_with("all (")), "{svg}");
        let diff = diff_flame_svg(&input[..1], &input, &opts()).unwrap();
        let t = titles(&diff);
        assert!(
            t.contains(&"main.c (base 0 B, new 4096 PiB, +4096 PiB)".to_string()),
            "{t:?}"
        );
    }

    #[test]
    fn a_stack_only_in_base_stays_visible_in_the_diff() {
        let base = stacks(&[
            ("main.main;main.gone", 4 << 20),
            ("main.main;main.kept", 1 << 20),
        ]);
        let new = stacks(&[
            ("main.main;main.kept", 3 << 20),
            ("main.main;main.added", 2 << 20),
        ]);
        let svg = diff_flame_svg(&base, &new, &opts()).unwrap();
        let t = titles(&svg);
        assert!(
            t.contains(&"main.gone (base 4.00 MiB, new 0 B, -4.00 MiB)".to_string()),
            "{t:?}"
        );
        assert!(t.contains(&"main.kept (base 1.00 MiB, new 3.00 MiB, +2.00 MiB)".to_string()));
        assert!(t.contains(&"main.added (base 0 B, new 2.00 MiB, +2.00 MiB)".to_string()));
        assert!(t.contains(&"main.main (base 5.00 MiB, new 5.00 MiB, unchanged)".to_string()));
        assert!(t.contains(&"all (base 5.00 MiB, new 5.00 MiB, unchanged)".to_string()));
        // Shrunk is blue, grown is red.
        let fill = |name: &str| {
            let at = svg.find(&format!("<title>{name} (")).unwrap();
            let rest = &svg[at..];
            let f = rest.find("fill=\"").unwrap() + 6;
            rest[f..f + rest[f..].find('"').unwrap()].to_string()
        };
        assert_eq!(fill("main.gone"), "rgb(100,100,255)");
        assert!(
            fill("main.kept").starts_with("rgb(255,"),
            "{}",
            fill("main.kept")
        );
        assert!(svg.contains("widths: larger of base, new"));
    }

    #[test]
    fn diff_tooltips_count_goroutines() {
        let svg = diff_flame_svg(
            &stacks(&[("main.main;main.worker", 8)]),
            &stacks(&[("main.main;main.worker", 8), ("main.main;main.watch", 150)]),
            &FlameOptions {
                count_name: "goroutines".into(),
                ..opts()
            },
        )
        .unwrap();
        let t = titles(&svg);
        assert!(
            t.contains(&"main.watch (base 0, new 150 goroutines, +150)".to_string()),
            "{t:?}"
        );
    }

    #[test]
    fn identical_sides_diff_to_nothing_changed() {
        let s = stacks(&[("a;b", 7), ("a;b;c", 3), ("x", 1)]);
        let svg = diff_flame_svg(&s, &s, &opts()).unwrap();
        for t in titles(&svg) {
            assert!(t.ends_with(", unchanged)"), "{t}");
        }
    }

    proptest! {
        #[test]
        fn folded_stacks_add_up_to_the_profile_total(p in arb_profile()) {
            for index in 0..p.sample_types.len() {
                let stacks = folded(&p, index);
                let sum: i64 = stacks.iter().map(|(_, v)| v).sum();
                prop_assert_eq!(sum, p.total(index));
                prop_assert!(stacks.windows(2).all(|w| w[0].0 < w[1].0));
                prop_assert!(stacks.iter().all(|(s, _)| !s.is_empty()));
            }
            prop_assert!(folded(&p, p.sample_types.len()).is_empty());
        }

        #[test]
        fn every_diff_frame_gets_both_figures(a in arb_profile(), b in arb_profile()) {
            let (fa, fb) = (folded(&a, 1), folded(&b, 1));
            let svg = diff_flame_svg(&fa, &fb, &opts()).unwrap();
            for t in titles(&svg) {
                prop_assert!(t.contains(" (base "), "{}", t);
            }
            let total_base: i64 = fa.iter().map(|(_, v)| v).sum();
            let total_new: i64 = fb.iter().map(|(_, v)| v).sum();
            if total_base > 0 || total_new > 0 {
                let root = format!(
                    "all (base {}, new {}",
                    units::format_bytes(total_base),
                    units::format_bytes(total_new)
                );
                prop_assert!(titles(&svg).iter().any(|t| t.starts_with(&root)), "{}", root);
            }
        }
    }
}
