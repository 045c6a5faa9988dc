//! The flamegraph drawing's tests.

use proptest::prelude::*;

use super::*;
use crate::analyse::diff::testing::arb_profile;
use crate::model::aggregate::folded;

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
fn the_rewrite_changes_only_the_tooltip_figures() {
    // With no figures to put in, inferno's SVG comes back byte for byte.
    let input = stacks(&[("main.main;a&b<c>'d\"", 3 << 20), ("main.main;e", 1 << 20)]);
    let svg = flame_svg(&input, &opts()).unwrap();
    assert_eq!(retitle(&svg, &HashMap::new(), "bytes").unwrap(), svg);
    // A name with entities keeps them as inferno escaped them, and gets both sides.
    let svg = diff_flame_svg(
        &stacks(&[("main.main;a&b<c>'d\"", 1 << 20)]),
        &input,
        &opts(),
    )
    .unwrap();
    let t = titles(&svg);
    assert!(
        t.iter().any(|t| t.starts_with("a&amp;b&lt;c&gt;")
            && t.ends_with("(base 1.00 MiB, new 3.00 MiB, +2.00 MiB)")),
        "{t:?}"
    );
    assert!(
        t.contains(&"e (base 0 B, new 1.00 MiB, +1.00 MiB)".to_string()),
        "{t:?}"
    );
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
