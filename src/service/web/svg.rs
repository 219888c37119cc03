//! Charts as inline SVG, drawn on the server from numbers (pure). Labels are escaped like any
//! other text ([`Html::text`]); coordinates are numbers we compute.

use std::fmt::Write;

use super::html::Html;

/// Series colours, in order (colour-blind safe, Okabe–Ito).
const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

fn num(h: &mut Html, v: f64) {
    let mut s = String::new();
    let _ = write!(s, "{v:.1}");
    h.text(&s);
}

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Writes ` fill="<colour>"` for series `i`.
fn fill(h: &mut Html, i: usize) {
    h.raw(" fill=\"").text(colour(i)).raw("\"");
}

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

/// One line of a [`line_chart`]: a name and a value in [0, 1] per x position (`None`: no
/// data there; the line skips it).
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// The opening `<svg>` of a chart of class `class`, `width` × `height`, with a white background
/// and `label` as its accessible name.
fn svg_open(class: &'static str, width: f64, height: f64, label: &str) -> Html {
    let mut h = Html::new();
    h.raw("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"")
        .raw(class)
        .raw("\" role=\"img\" width=\"")
        .show(width)
        .raw("\" height=\"")
        .show(height)
        .raw("\" viewBox=\"0 0 ")
        .show(width)
        .raw(" ")
        .show(height)
        .raw("\" aria-label=\"")
        .text(label)
        .raw("\"><rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>");
    h
}

const W: f64 = 560.0;
const H: f64 = 260.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 40.0;

/// Shares over time: x labels (periods), y from 0 % to 100 %, one polyline (and a dot per
/// value) per line, and a legend below.
pub fn line_chart(label: &str, x: &[String], lines: &[Line]) -> Html {
    let legend_rows = lines.len().div_ceil(3) as f64;
    let height = H + legend_rows * 18.0;
    let mut h = svg_open("chart line", W, height, label);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = TOP + plot_h * (1.0 - tick);
        h.raw("<line x1=\"")
            .show(LEFT)
            .raw("\" x2=\"")
            .show(W - RIGHT);
        h.raw("\" y1=\"");
        num(&mut h, y);
        h.raw("\" y2=\"");
        num(&mut h, y);
        h.raw("\" stroke=\"#d0d7de\"/><text x=\"")
            .show(LEFT - 6.0)
            .raw("\" y=\"");
        num(&mut h, y + 4.0);
        h.raw("\" text-anchor=\"end\" font-size=\"11\">")
            .text(&pct(tick))
            .raw("</text>");
    }
    let n = x.len().max(1);
    let xpos = |i: usize| {
        if n == 1 {
            LEFT + plot_w / 2.0
        } else {
            LEFT + plot_w * i as f64 / (n - 1) as f64
        }
    };
    // At most 8 x labels, evenly spaced.
    let step = x.len().div_ceil(8).max(1);
    for (i, label) in x.iter().enumerate().filter(|(i, _)| i % step == 0) {
        h.raw("<text x=\"");
        num(&mut h, xpos(i));
        h.raw("\" y=\"")
            .show(H - BOTTOM + 16.0)
            .raw("\" text-anchor=\"middle\" font-size=\"11\">")
            .text(label)
            .raw("</text>");
    }
    for (li, line) in lines.iter().enumerate() {
        let points: Vec<(f64, f64)> = line
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (xpos(i), TOP + plot_h * (1.0 - v.clamp(0.0, 1.0)))))
            .collect();
        if points.len() > 1 {
            h.raw("<polyline fill=\"none\" stroke-width=\"2\" stroke=\"")
                .text(colour(li))
                .raw("\" points=\"");
            for (px, py) in &points {
                num(&mut h, *px);
                h.raw(",");
                num(&mut h, *py);
                h.raw(" ");
            }
            h.raw("\"/>");
        }
        for (px, py) in &points {
            h.raw("<circle r=\"3.5\" cx=\"");
            num(&mut h, *px);
            h.raw("\" cy=\"");
            num(&mut h, *py);
            h.raw("\"");
            fill(&mut h, li);
            h.raw("/>");
        }
        let (col, row) = ((li % 3) as f64, (li / 3) as f64);
        let (lx, ly) = (LEFT + col * 170.0, H + row * 18.0);
        h.raw("<rect width=\"12\" height=\"12\" x=\"")
            .show(lx)
            .raw("\" y=\"")
            .show(ly - 10.0)
            .raw("\"");
        fill(&mut h, li);
        h.raw("/><text font-size=\"12\" x=\"")
            .show(lx + 16.0)
            .raw("\" y=\"")
            .show(ly)
            .raw("\">")
            .text(&clip(&line.name, 24))
            .raw("</text>");
    }
    h.raw("</svg>");
    h
}

/// One bar of a [`bar_chart`]: a share in [0, 1] and the text shown beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub name: String,
    pub share: f64,
    pub label: String,
}

/// Horizontal bars from 0 % to 100 %, one per row.
pub fn bar_chart(label: &str, bars: &[Bar]) -> Html {
    const ROW: f64 = 24.0;
    const NAME: f64 = 180.0;
    const BAR: f64 = 260.0;
    let height = TOP * 2.0 + ROW * bars.len().max(1) as f64;
    let width = NAME + BAR + 120.0;
    let mut h = svg_open("chart bar", width, height, label);
    for (i, bar) in bars.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        h.raw("<text font-size=\"12\" x=\"")
            .show(NAME - 6.0)
            .raw("\" y=\"")
            .show(y + 15.0)
            .raw("\" text-anchor=\"end\">")
            .text(&clip(&bar.name, 26))
            .raw("</text><rect x=\"")
            .show(NAME)
            .raw("\" y=\"")
            .show(y + 3.0)
            .raw("\" height=\"16\" width=\"")
            .show(BAR)
            .raw("\" fill=\"#eaeef2\"/><rect x=\"")
            .show(NAME)
            .raw("\" y=\"")
            .show(y + 3.0)
            .raw("\" height=\"16\" width=\"");
        num(&mut h, BAR * bar.share.clamp(0.0, 1.0));
        h.raw("\"");
        fill(&mut h, i);
        h.raw("/><text font-size=\"12\" x=\"")
            .show(NAME + BAR + 6.0)
            .raw("\" y=\"")
            .show(y + 15.0)
            .raw("\">")
            .text(&bar.label)
            .raw("</text>");
    }
    h.raw("</svg>");
    h
}

/// A grid of counts: one row per key, one column per category; a cell's shade is its count
/// over the row's total (the share of the row's graded samples failing in that category).
pub fn heatmap(label: &str, columns: &[&str], rows: &[(String, usize, Vec<usize>)]) -> Html {
    const NAME: f64 = 180.0;
    const CELL: f64 = 64.0;
    const ROW: f64 = 24.0;
    let width = NAME + CELL * columns.len() as f64 + 8.0;
    let height = 28.0 + ROW * rows.len().max(1) as f64;
    let mut h = svg_open("chart heat", width, height, label);
    for (i, c) in columns.iter().enumerate() {
        h.raw("<text font-size=\"11\" text-anchor=\"middle\" x=\"")
            .show(NAME + CELL * i as f64 + CELL / 2.0)
            .raw("\" y=\"16\">")
            .text(c)
            .raw("</text>");
    }
    for (r, (name, total, counts)) in rows.iter().enumerate() {
        let y = 24.0 + ROW * r as f64;
        h.raw("<text font-size=\"12\" text-anchor=\"end\" x=\"")
            .show(NAME - 6.0)
            .raw("\" y=\"")
            .show(y + 16.0)
            .raw("\">")
            .text(&clip(name, 26))
            .raw("</text>");
        for (i, count) in counts.iter().enumerate() {
            let share = if *total == 0 {
                0.0
            } else {
                *count as f64 / *total as f64
            };
            // From white (0 %) to a deep red (100 %).
            let shade = |full: f64| (255.0 - (255.0 - full) * share).round() as u8;
            let colour = format!(
                "#{:02x}{:02x}{:02x}",
                shade(207.0),
                shade(34.0),
                shade(46.0)
            );
            h.raw("<rect x=\"")
                .show(NAME + CELL * i as f64 + 1.0)
                .raw("\" y=\"")
                .show(y + 1.0)
                .raw("\" width=\"")
                .show(CELL - 2.0)
                .raw("\" height=\"")
                .show(ROW - 2.0)
                .raw("\" stroke=\"#d0d7de\" fill=\"")
                .text(&colour)
                .raw("\"/><text font-size=\"11\" text-anchor=\"middle\" x=\"")
                .show(NAME + CELL * i as f64 + CELL / 2.0)
                .raw("\" y=\"")
                .show(y + 16.0)
                .raw("\" fill=\"")
                .raw(if share > 0.5 { "#ffffff" } else { "#1f2328" })
                .raw("\">")
                .show(count)
                .raw("</text>");
        }
    }
    h.raw("</svg>");
    h
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max - 1).collect();
        s.push('…');
        s
    }
}
