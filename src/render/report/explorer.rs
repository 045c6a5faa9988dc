//! The explorer of `index.html`: what the page carries for its script (`explorer.js`) to pick
//! two moments of a life and show what the heap gained and lost between them. Stacks are
//! carried once, as a table of frames and a table of stacks; each carried capture holds only
//! the stacks whose in-use bytes changed since the life's capture before it. The data goes
//! into the page as JSON in a `<script type="application/json">` block ([`Markup::json`]),
//! and the script runs under a Content-Security-Policy that names its hash, so it is the only
//! script the page can run.
//!
//! # The report's explorer
//!
//! `index.html` lets a person drag a span on a life's timeline and see what the heap gained and
//! lost between the captures at its ends (a flamegraph that zooms and searches, a site table that
//! sorts and filters), the view kept in the URL fragment and named in `document.title`. The page
//! stays one offline file. What it carries is `pipeline::explorer`'s (every k-th capture past the
//! budget, said by `carried_note`); render adds each life's `chart::Timeline` (the series the
//! static chart draws), so the page's chart and the static one read the same figures.
//!
//! **Into the page.** The data goes in one `<script type="application/json">` block, written by
//! `Markup::json`: serde_json with a `Formatter` that writes `<`, `>` and `&` inside strings as
//! `\u003c`, `\u003e`, `\u0026` (JSON's own escapes; `JSON.parse` reads them back), so no name can
//! end the block or open a comment, by construction rather than by a replace over the output. The
//! script is `explorer.js`, included with `include_str!` and written into the page as it is; the
//! Content-Security-Policy's `script-src` is its SHA-256 (`'sha256-…'`), so the browser runs it
//! and no other script, inline or not, and `default-src 'none'` still forbids every fetch. The
//! hash comes from ring's `digest`, already compiled for rustls (no new crate in the tree). The
//! inlined SVGs keep losing their scripts and `on…` attributes (`inline.rs`); the script adds its
//! listeners with `addEventListener` and writes text only through `textContent` and attribute
//! values (a unit test holds it to no `innerHTML`, `eval`, `fetch`, …). Without the script the page
//! is the static report: the explorer's place holds one sentence, and the static chart and growth
//! flamegraph stay; with it, those two are hidden and the explorer draws its own.
//!
//! **The script.** One file, no framework, no build step: readable, and what a reviewer sees is
//! what runs. Its numbers are heapwatch's: `bytes()` is `units::format_bytes` (ties rounded to
//! even, as Rust's formatting does), the capture at a moment is the last stored one taken by then
//! (the `compare` rule), and a site is a leaf function, so every figure it shows is what
//! `heapwatch diff --json` gives for the same two profiles (the browser test checks it so; its
//! client of Chromium is `tests/cli/devtools.rs`).

use serde::Serialize;

use super::RunView;
use super::chart::Timeline;
use super::markup::Markup;
use crate::units::{format_bytes, ordinal};

/// The page's script: readable, no framework, no inline handler, text into the DOM only
/// through `textContent` and attributes.
pub const SCRIPT: &str = include_str!("explorer.js");

/// The `script-src` of the page's Content-Security-Policy: the hash of [`SCRIPT`], so that
/// the browser runs it and nothing else (a `<script>` that a run smuggled into the page would
/// not run even if it were not escaped).
pub fn script_source() -> String {
    use base64::Engine as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, SCRIPT.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

/// One heap capture the page carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CarriedCapture {
    pub seq: u64,
    /// Seconds since the first capture of its life.
    #[serde(rename = "t")]
    pub age_s: f64,
    /// Pairs of (stack, in-use bytes) for the stacks that changed since the capture before it
    /// in the same life (all its stacks for a life's first); 0 is a stack gone.
    #[serde(rename = "d")]
    pub changed: Vec<i64>,
}

/// The carried captures of one life (boot cycle).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CarriedLife {
    pub index: u32,
    /// Stored heap captures of the life, carried or not.
    pub stored: usize,
    pub captures: Vec<CarriedCapture>,
    /// The span the page shows first: the report's growth flamegraph's, in seconds.
    pub default_span: Option<(f64, f64)>,
}

/// What the page's explorer needs of the profiles: the stacks once, and each carried capture's
/// figures (in-use bytes per stack, function granularity, as `heapwatch diff` groups them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CarriedStacks {
    /// Function names; a stack is a list of indices into it, root first.
    pub frames: Vec<String>,
    pub stacks: Vec<Vec<u32>>,
    pub lives: Vec<CarriedLife>,
    /// Every `stride`-th capture of each life is carried (its first and last always): 1 when
    /// all are.
    pub stride: usize,
    /// The size the carried data was held under, in bytes of JSON.
    pub budget: usize,
}

impl CarriedStacks {
    pub fn carried(&self) -> usize {
        self.lives.iter().map(|l| l.captures.len()).sum()
    }

    pub fn stored(&self) -> usize {
        self.lives.iter().map(|l| l.stored).sum()
    }
}

/// The data block's document: the carried stacks and each life's timeline.
#[derive(Serialize)]
struct PageData<'a> {
    schema: u32,
    frames: &'a [String],
    stacks: &'a [Vec<u32>],
    lives: Vec<PageLife<'a>>,
}

#[derive(Serialize)]
struct PageLife<'a> {
    index: u32,
    captures: &'a [CarriedCapture],
    default_span: Option<(f64, f64)>,
    timeline: Timeline,
}

/// The data block of the page: `<script type="application/json" id="explorer-data">`.
pub fn data_block(run: &RunView, carried: &CarriedStacks) -> Markup {
    let lives = carried
        .lives
        .iter()
        .filter_map(|life| {
            let pos = run
                .growth
                .cycles
                .iter()
                .position(|c| c.index == life.index)?;
            Some(PageLife {
                index: life.index,
                captures: &life.captures,
                default_span: life.default_span,
                timeline: Timeline::of_cycle(run, pos),
            })
        })
        .collect();
    let data = PageData {
        schema: crate::model::SCHEMA,
        frames: &carried.frames,
        stacks: &carried.stacks,
        lives,
    };
    crate::markup!(
        "<script type=\"application/json\" id=\"explorer-data\">{}</script>",
        Markup::json(&data)
    )
}

/// What the page says of the captures it carries, when it does not carry them all: how many,
/// by which rule, and which (per life, their seqs).
pub fn carried_note(carried: &CarriedStacks, life: u32) -> Option<Markup> {
    if carried.stride <= 1 {
        return None;
    }
    let l = carried.lives.iter().find(|l| l.index == life)?;
    let seqs: Vec<String> = l.captures.iter().map(|c| format!("#{}", c.seq)).collect();
    Some(crate::markup!(
        "<div class=\"note\">To stay under {} of data, this page carries {} of the run's {} stored heap captures: every {} of each life, and each life's first and last. This life: {} of {}. <details><summary>The captures carried</summary><code>{}</code></details></div>",
        format_bytes(carried.budget as i64),
        carried.carried(),
        carried.stored(),
        ordinal(carried.stride),
        l.captures.len(),
        l.stored,
        &seqs.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text reaches the page only through `textContent` and attribute values, and the script
    /// fetches nothing: no API that parses markup, runs text as code or reaches the network.
    #[test]
    fn the_script_builds_no_markup_from_text_and_fetches_nothing() {
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setTimeout(\"",
            "fetch(",
            "XMLHttpRequest",
            "WebSocket",
            "import(",
            "http://",
            "https://",
        ] {
            let found = SCRIPT.replace("http://www.w3.org/2000/svg", "");
            assert!(!found.contains(banned), "explorer.js uses {banned}");
        }
        assert!(
            !SCRIPT.contains("</script"),
            "the script cannot end its element"
        );
    }

    #[test]
    fn a_page_that_does_not_carry_every_capture_says_which_it_carries() {
        let capture = |seq| CarriedCapture {
            seq,
            age_s: 0.0,
            changed: Vec::new(),
        };
        let mut carried = CarriedStacks {
            lives: vec![CarriedLife {
                index: 2,
                stored: 9,
                captures: vec![capture(3), capture(7), capture(11)],
                default_span: None,
            }],
            stride: 1,
            budget: 8_000_000,
            ..CarriedStacks::default()
        };
        assert!(
            carried_note(&carried, 2).is_none(),
            "all carried: nothing to say"
        );
        carried.stride = 4;
        let note = carried_note(&carried, 2).unwrap().into_string();
        assert!(
            note.contains("carries 3 of the run's 9 stored heap captures: every 4th"),
            "{note}"
        );
        assert!(note.contains("<code>#3 #7 #11</code>"), "{note}");
        assert!(carried_note(&carried, 1).is_none(), "no such life");
        let words: Vec<String> = [2, 3, 4, 11, 12, 21, 22, 113].map(ordinal).to_vec();
        assert_eq!(
            words,
            ["2nd", "3rd", "4th", "11th", "12th", "21st", "22nd", "113th"]
        );
    }

    #[test]
    fn the_policy_names_the_script_by_its_sha256() {
        let source = script_source();
        assert!(source.starts_with("'sha256-") && source.ends_with('\''));
        // 32 bytes in base64: 44 characters with their padding.
        assert_eq!(source.len(), "'sha256-'".len() + 44, "{source}");
    }
}
