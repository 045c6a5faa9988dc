//! The stacked bar of where a cycle's memory went at its peak: Go heap allocated, held free,
//! runtime, other anonymous, then the page cache by kind (shared memory, dirty, under writeback,
//! clean), against the limit. Plain SVG, no script.

use crate::analyse::breakdown::MemoryBreakdown;
use crate::html;
use crate::units::format_bytes;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 28.0;

/// The bar, or `None` when the run holds no split of the memory.
pub fn svg(b: &MemoryBreakdown) -> Option<String> {
    let anon_rest = if b.go_heap_live.is_none() {
        b.anon
    } else {
        None
    };
    let parts: Vec<(&str, u64, &str)> = [
        ("Go heap allocated (HeapAlloc)", b.go_heap_live, "#c0392b"),
        ("held free", b.go_held_free, "#e67e22"),
        ("runtime", b.go_runtime, "#f1c40f"),
        ("anonymous", anon_rest, "#c0392b"),
        ("other anonymous", b.other_anon, "#8e44ad"),
        ("shared memory and tmpfs", b.shmem, "#6c3483"),
        (
            "dirty",
            b.dirty.filter(|_| b.clean_cache.is_some()),
            "#1a5276",
        ),
        ("under writeback", b.writeback, "#2471a3"),
        ("clean page cache", b.clean_cache, "#7fb3d5"),
        // Samples recorded before the cache was split by kind.
        (
            "mapped files",
            b.mapped_files.filter(|_| b.clean_cache.is_none()),
            "#2980b9",
        ),
        (
            "other page cache",
            b.other_cache.filter(|_| b.clean_cache.is_none()),
            "#7fb3d5",
        ),
    ]
    .into_iter()
    .filter_map(|(name, v, colour)| v.filter(|&v| v > 0).map(|v| (name, v, colour)))
    .collect();
    if parts.len() < 2 {
        return None;
    }
    let scale = b.limit.unwrap_or(b.total).max(b.total).max(1) as f64;
    let mut out = String::new();
    html!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"breakdown\" width=\"{WIDTH}\" height=\"{}\" viewBox=\"0 0 {WIDTH} {}\" role=\"img\"><title>{}</title>",
        HEIGHT + 18.0 * parts.len() as f64,
        HEIGHT + 18.0 * parts.len() as f64,
        &crate::render::memory::breakdown_words(b)
    );
    let mut x = 0.0;
    for (i, (name, v, colour)) in parts.iter().enumerate() {
        let w = *v as f64 / scale * WIDTH;
        html!(
            out,
            "<rect x=\"{:.1}\" y=\"0\" width=\"{:.1}\" height=\"{HEIGHT}\" fill=\"{}\"><title>{} {}</title></rect>\
             <rect x=\"0\" y=\"{:.0}\" width=\"10\" height=\"10\" fill=\"{}\"/>\
             <text x=\"14\" y=\"{:.0}\" font-size=\"11\">{} {}</text>",
            x,
            w,
            colour,
            name,
            format_bytes(*v as i64),
            HEIGHT + 6.0 + 18.0 * i as f64,
            colour,
            HEIGHT + 15.0 + 18.0 * i as f64,
            name,
            format_bytes(*v as i64)
        );
        x += w;
    }
    if let Some(l) = b.limit {
        html!(
            out,
            "<line x1=\"{WIDTH}\" y1=\"0\" x2=\"{WIDTH}\" y2=\"{HEIGHT}\" stroke=\"#000\" stroke-width=\"2\"><title>limit {}</title></line>",
            format_bytes(l as i64)
        );
    }
    out.push_str("</svg>");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_has_a_segment_per_known_kind_and_nothing_without_a_split() {
        let b = MemoryBreakdown {
            total: 900 << 20,
            limit: Some(1 << 30),
            go_heap_live: Some(200 << 20),
            go_held_free: Some(50 << 20),
            mapped_files: Some(300 << 20),
            other_cache: Some(350 << 20),
            ..MemoryBreakdown::default()
        };
        let svg = svg(&b).unwrap();
        assert_eq!(svg.matches("<rect").count(), 8);
        let title = crate::markup!(
            "<title>{}</title>",
            crate::render::memory::breakdown_words(&b)
        );
        assert!(svg.contains(title.as_str()), "{svg}");
        assert!(svg.contains("limit 1.00 GiB"));
        let plain = MemoryBreakdown {
            total: 1 << 20,
            ..MemoryBreakdown::default()
        };
        assert_eq!(super::svg(&plain), None);
    }
}
