//! Line charts as inline SVG: axes with readable ticks, a legend, shaded bands and markers, laid
//! out so that no label covers another or the curves.

use std::fmt::Write;

/// Colours for successive lines (colour-blind-safe palette).
pub const PALETTE: [&str; 6] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"];

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend text.
    pub name: String,
    /// Stroke colour.
    pub color: String,
    /// (x, y) points; non-finite values are skipped.
    pub points: Vec<(f64, f64)>,
    /// Draw dots at the points (sparse series such as evaluations).
    pub dots: bool,
}

/// A shaded x-range, such as a training phase.
#[derive(Debug, Clone)]
pub struct Band {
    /// Start of the range.
    pub from: f64,
    /// End of the range.
    pub to: f64,
    /// Label written at its top.
    pub label: String,
    /// Fill colour.
    pub color: String,
}

/// A labelled vertical marker, such as a finding or a decision.
#[derive(Debug, Clone)]
pub struct Marker {
    /// Its x position.
    pub x: f64,
    /// Short label.
    pub label: String,
    /// Stroke colour.
    pub color: String,
}

/// A chart: lines against a shared x-axis.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X-axis label, with its unit.
    pub x_label: String,
    /// Y-axis label, with its unit.
    pub y_label: String,
    /// The lines.
    pub lines: Vec<Line>,
    /// Shaded ranges behind the lines.
    pub bands: Vec<Band>,
    /// Vertical markers.
    pub markers: Vec<Marker>,
    /// Force a log scale; by default a log scale is used when positive data spans > 2 decades.
    pub log_y: Option<bool>,
    /// The x-axis spans at least this range (charts of one run share their steps).
    pub x_span: Option<(f64, f64)>,
}

const W: f64 = 760.0;
/// Height of the plot area itself.
const PLOT_H: f64 = 190.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const BOTTOM: f64 = 40.0;
/// Baseline of the title.
const TITLE_Y: f64 = 18.0;
/// Height of one row of legend entries or of labels above the plot.
const ROW_H: f64 = 13.0;
/// Estimated advance of one character at the labels' 10-11 px size (system sans-serif).
const CHAR_W: f64 = 6.2;
/// Horizontal room kept between two labels on one row.
const GAP: f64 = 6.0;
/// Width of a legend entry's colour swatch and the space after it.
const SWATCH: f64 = 24.0;

/// Where a chart's pieces go: the legend in rows under the title, the phase and marker labels
/// in rows of their own above the plot, none over another or over the curves.
struct Layout {
    /// Each legend entry's left edge and baseline.
    legend: Vec<(f64, f64)>,
    /// Each band label's left edge and baseline, then each marker label's (in `markers` order).
    labels: Vec<(f64, f64)>,
    /// Top of the plot area.
    top: f64,
}

impl Layout {
    fn new(chart: &Chart, scale_x: &dyn Fn(f64) -> f64) -> Layout {
        let mut legend = Vec::new();
        let (mut x, mut row) = (LEFT, 0.0);
        for l in &chart.lines {
            let w = SWATCH + text_width(&l.name);
            if x > LEFT && x + w > W - RIGHT {
                x = LEFT;
                row += 1.0;
            }
            legend.push((x, TITLE_Y + ROW_H * (row + 1.0)));
            x += w + 2.0 * GAP;
        }
        let rows_above = if chart.lines.is_empty() { 0.0 } else { row + 1.0 };
        let strip = TITLE_Y + ROW_H * rows_above + 4.0;
        let anchors = chart
            .bands
            .iter()
            .map(|b| (scale_x(b.from) + 3.0, b.label.as_str()))
            .chain(
                chart
                    .markers
                    .iter()
                    .map(|m| (scale_x(m.x) + 2.0, m.label.as_str())),
            );
        let (placed, rows) = rows_for(anchors);
        let top = strip + ROW_H * rows as f64 + 4.0;
        let labels = placed
            .into_iter()
            .map(|(x, r)| (x, strip + ROW_H * (r as f64 + 1.0) - 3.0))
            .collect();
        Layout { legend, labels, top }
    }
}

/// The estimated width of a label.
fn text_width(text: &str) -> f64 {
    CHAR_W * text.chars().count() as f64
}

/// Puts labels anchored at x positions on the fewest rows with no two overlapping: each on the
/// first row whose last label ends before it (shifted left to end inside the chart). Returns
/// each label's left edge and row, and the rows used.
fn rows_for<'a>(anchors: impl Iterator<Item = (f64, &'a str)>) -> (Vec<(f64, usize)>, usize) {
    let items: Vec<(f64, f64)> = anchors.map(|(x, t)| (x, text_width(t))).collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| items[a].0.total_cmp(&items[b].0));
    let mut ends: Vec<f64> = Vec::new();
    let mut placed = vec![(0.0, 0); items.len()];
    for i in order {
        let (x, w) = items[i];
        let x = x.min(W - RIGHT - w).max(0.0);
        let row = ends.iter().position(|&end| end + GAP <= x).unwrap_or(ends.len());
        if row == ends.len() {
            ends.push(f64::NEG_INFINITY);
        }
        ends[row] = x + w;
        placed[i] = (x, row);
    }
    (placed, ends.len())
}

impl Chart {
    /// True when the chart has at least one finite point.
    pub fn has_data(&self) -> bool {
        self.lines
            .iter()
            .any(|l| l.points.iter().any(|p| p.0.is_finite() && p.1.is_finite()))
    }

    /// The chart as an `<svg>` element.
    pub fn svg(&self) -> String {
        let pts: Vec<(f64, f64)> = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().copied())
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        let (x0, x1) = extent(
            pts.iter()
                .map(|p| p.0)
                .chain(self.bands.iter().flat_map(|b| [b.from, b.to]))
                .chain(self.x_span.into_iter().flat_map(|(a, b)| [a, b])),
        );
        let positive = pts.iter().all(|p| p.1 > 0.0);
        let (ymin, ymax) = extent(pts.iter().map(|p| p.1));
        let log = self
            .log_y
            .unwrap_or(positive && ymin > 0.0 && ymax / ymin > 100.0)
            && positive;
        let layout = Layout::new(self, &|v| Scale::new(x0, x1, 0.0, 1.0, false, 0.0).x(v));
        let top = layout.top;
        let h = top + PLOT_H + BOTTOM;
        let scale = Scale::new(x0, x1, ymin, ymax, log, top);
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{}" data-x0="{x0}" data-x1="{x1}" data-left="{LEFT}" data-right="{}">"#,
            esc(&self.title),
            W - RIGHT
        );
        let _ = write!(
            s,
            r#"<text x="{LEFT}" y="{TITLE_Y}" class="title">{}</text>"#,
            esc(&self.title)
        );
        for (l, &(x, y)) in self.lines.iter().zip(&layout.legend) {
            legend(&mut s, l, x, y);
        }
        let (band_labels, marker_labels) = layout.labels.split_at(self.bands.len());
        for (b, &(lx, ly)) in self.bands.iter().zip(band_labels) {
            let (a, z) = (scale.x(b.from), scale.x(b.to));
            let _ = write!(
                s,
                r#"<rect class="band" x="{a:.1}" y="{top}" width="{:.1}" height="{PLOT_H}" fill="{}"/><text class="band-label" x="{lx:.1}" y="{ly:.1}">{}</text>"#,
                (z - a).max(0.5),
                b.color,
                esc(&b.label)
            );
        }
        self.axes(&mut s, &scale);
        for l in &self.lines {
            line_path(&mut s, l, &scale);
        }
        for (m, &(lx, ly)) in self.markers.iter().zip(marker_labels) {
            let x = scale.x(m.x);
            let _ = write!(
                s,
                r#"<line class="marker" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{}"/><text class="marker-label" x="{lx:.1}" y="{ly:.1}" fill="{}">{}</text>"#,
                ly + 2.0,
                top + PLOT_H,
                m.color,
                m.color,
                esc(&m.label)
            );
        }
        s.push_str("</svg>");
        s
    }

    fn axes(&self, s: &mut String, sc: &Scale) {
        let (bx, by) = (sc.top + PLOT_H, W - RIGHT);
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" y1="{bx}" x2="{by}" y2="{bx}"/>"#
        );
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" y1="{:.1}" x2="{LEFT}" y2="{bx}"/>"#,
            sc.top
        );
        for t in nice_ticks(sc.x0, sc.x1, 8) {
            let x = sc.x(t);
            let _ = write!(
                s,
                r#"<line class="tick" x1="{x:.1}" y1="{bx}" x2="{x:.1}" y2="{:.1}"/><text class="xt" x="{x:.1}" y="{:.1}">{}</text>"#,
                bx + 4.0,
                bx + 16.0,
                fmt_num(t)
            );
        }
        let yticks = if sc.log {
            log_ticks(sc.y0, sc.y1)
        } else {
            nice_ticks(sc.y0, sc.y1, 6)
        };
        let labels = tick_labels(&yticks);
        for (t, label) in yticks.into_iter().zip(labels) {
            let y = sc.y(t);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{by}" y2="{y:.1}"/><text class="yt" x="{:.1}" y="{:.1}">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                label
            );
        }
        let scale_note = if sc.log { " (log scale)" } else { "" };
        let _ = write!(
            s,
            r#"<text class="xl" x="{:.1}" y="{:.1}">{}</text>"#,
            (LEFT + by) / 2.0,
            bx + BOTTOM - 6.0,
            esc(&self.x_label)
        );
        let _ = write!(
            s,
            r#"<text class="yl" transform="translate(14 {:.1}) rotate(-90)">{}{scale_note}</text>"#,
            (sc.top + bx) / 2.0,
            esc(&self.y_label)
        );
    }
}

/// At most about `max` of `points` for drawing: in each of `max / 4` runs of consecutive points,
/// the first, the lowest, the highest and the last (a spike stays visible), and a non-finite
/// point where the run has one (a gap in the line stays). Fewer points come back unchanged.
pub fn downsample(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    let buckets = (max / 4).max(1);
    if points.len() <= max {
        return points.to_vec();
    }
    let per = points.len().div_ceil(buckets);
    let mut out = Vec::with_capacity(4 * buckets + buckets);
    for run in points.chunks(per) {
        let by_y = |a: &&(f64, f64), b: &&(f64, f64)| a.1.total_cmp(&b.1);
        let finite = || run.iter().enumerate().filter(|(_, p)| p.1.is_finite());
        let lo = finite().min_by(|a, b| by_y(&a.1, &b.1)).map(|(i, _)| i);
        let hi = finite().max_by(|a, b| by_y(&a.1, &b.1)).map(|(i, _)| i);
        let gap = run.iter().position(|p| !p.1.is_finite());
        let mut keep: Vec<usize> = [Some(0), lo, hi, gap, Some(run.len() - 1)]
            .into_iter()
            .flatten()
            .collect();
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().map(|i| run[i]));
    }
    out
}

fn line_path(s: &mut String, l: &Line, sc: &Scale) {
    let mut d = String::new();
    let mut pen_up = true;
    for &(x, y) in &l.points {
        if !(x.is_finite() && y.is_finite()) || (sc.log && y <= 0.0) {
            pen_up = true;
            continue;
        }
        let _ = write!(
            d,
            "{}{:.1},{:.1}",
            if pen_up { "M" } else { "L" },
            sc.x(x),
            sc.y(y)
        );
        pen_up = false;
    }
    if !d.is_empty() {
        let _ = write!(s, r#"<path class="line" d="{d}" stroke="{}"/>"#, l.color);
    }
    if l.dots {
        for &(x, y) in l
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!sc.log || p.1 > 0.0))
        {
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                sc.x(x),
                sc.y(y),
                l.color
            );
        }
    }
}

fn legend(s: &mut String, l: &Line, x: f64, y: f64) {
    let _ = write!(
        s,
        r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text class="legend" x="{:.1}" y="{y:.1}">{}</text>"#,
        y - 4.0,
        x + 18.0,
        y - 4.0,
        l.color,
        x + SWATCH,
        esc(&l.name)
    );
}

/// Maps data to pixels.
struct Scale {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    log: bool,
    /// Top of the plot area.
    top: f64,
}

impl Scale {
    fn new(x0: f64, x1: f64, y0: f64, y1: f64, log: bool, top: f64) -> Scale {
        let (y0, y1) = if log {
            (10f64.powf(y0.log10().floor()), 10f64.powf(y1.log10().ceil()))
        } else {
            let pad = (y1 - y0) * 0.05;
            let lo = if y0 >= 0.0 && y0 - pad < 0.0 {
                0.0
            } else {
                y0 - pad
            };
            (lo, y1 + pad)
        };
        Scale {
            x0,
            x1,
            y0,
            y1,
            log,
            top,
        }
    }

    fn x(&self, v: f64) -> f64 {
        LEFT + (v - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)
    }

    fn y(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.log10() - self.y0.log10()) / (self.y1.log10() - self.y0.log10())
        } else {
            (v - self.y0) / (self.y1 - self.y0)
        };
        self.top + PLOT_H - f * PLOT_H
    }
}

/// The finite extent of values, widened when degenerate.
fn extent(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - d, hi + d);
    }
    (lo, hi)
}

/// Round tick values (1, 2 or 5 × 10^k apart) inside [lo, hi], about `target` of them.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    // Multiples of the step, rounded to its decimals so that 3 × 0.1 prints as 0.3.
    let scale = 10f64.powi((-step.log10().floor()).max(0.0) as i32 + 1);
    let first = (lo / step).ceil() as i64;
    (first..)
        .map(|k| (k as f64 * step * scale).round() / scale)
        .take_while(|t| *t <= hi + step * 1e-9)
        .take(50)
        .collect()
}

/// Powers of ten inside [lo, hi] (with 2× and 5× when there are few decades).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mults: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    (a..=b)
        .flat_map(|e| mults.iter().map(move |m| m * 10f64.powi(e)))
        .filter(|t| *t >= lo * (1.0 - 1e-9) && *t <= hi * (1.0 + 1e-9))
        .collect()
}

/// Tick labels that tell every tick apart: [`fmt_num`]'s, or with as many significant digits as
/// that takes (a narrow range such as 9.5e-4 to 1.05e-3).
fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let distinct = |l: &[String]| l.windows(2).all(|w| w[0] != w[1]);
    let plain: Vec<String> = ticks.iter().map(|t| fmt_num(*t)).collect();
    if distinct(&plain) {
        return plain;
    }
    (1..6)
        .map(|p| ticks.iter().map(|t| format!("{t:.p$e}")).collect::<Vec<_>>())
        .find(|l| distinct(l))
        .unwrap_or(plain)
}

/// A short, readable number for a tick or a table.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Escapes text for XML and HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_points_are_drawn_from_a_few_thousand_that_keep_spikes_and_gaps() {
        let mut pts: Vec<(f64, f64)> = (0..1_000_000)
            .map(|i| (i as f64, 1.0 / (1.0 + i as f64)))
            .collect();
        pts[654_321].1 = 50.0;
        pts[123_456].1 = f64::NAN;
        let d = downsample(&pts, 2000);
        assert!(d.len() <= 2500, "{}", d.len());
        assert!(d.contains(&(654_321.0, 50.0)), "the spike is drawn");
        assert!(
            d.iter().any(|p| p.0 == 123_456.0 && p.1.is_nan()),
            "the gap is drawn"
        );
        assert_eq!(d.first(), pts.first());
        assert_eq!(d.last(), pts.last());
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0), "in order");
        assert_eq!(downsample(&pts[..100], 2000), pts[..100].to_vec());
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 1000.0, 5),
            vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]
        );
        assert_eq!(nice_ticks(0.13, 0.61, 5), vec![0.2, 0.3, 0.4, 0.5, 0.6]);
        assert_eq!(log_ticks(1e-4, 1.0), vec![1e-4, 1e-3, 1e-2, 1e-1, 1.0]);
        assert_eq!(log_ticks(0.1, 10.0), vec![0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]);
    }

    #[test]
    fn ticks_of_a_narrow_range_are_told_apart() {
        let ticks = nice_ticks(9e-4, 1.1e-3, 6);
        let labels = tick_labels(&ticks);
        assert!(labels.windows(2).all(|w| w[0] != w[1]), "{labels:?}");
        assert_eq!(tick_labels(&[0.0, 0.5, 1.0]), ["0", "0.5", "1"]);
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(1500.0), "1500");
        assert_eq!(fmt_num(3e-5), "3e-5");
        assert_eq!(fmt_num(0.0), "0");
    }

    #[test]
    fn a_loss_spanning_decades_gets_a_log_axis() {
        let line = |pts: Vec<(f64, f64)>| Line {
            name: "loss".into(),
            color: PALETTE[0].into(),
            points: pts,
            dots: false,
        };
        let wide = Chart {
            lines: vec![line(
                (1..100).map(|i| (i as f64, 10.0 / (i * i) as f64)).collect(),
            )],
            ..Chart::default()
        };
        assert!(wide.svg().contains("(log scale)"));
        let narrow = Chart {
            lines: vec![line(vec![(0.0, 0.5), (1.0, 0.4)])],
            ..Chart::default()
        };
        assert!(!narrow.svg().contains("(log scale)"));
    }

    /// (class, x, y, text) of every `<text>` element of an SVG.
    fn texts(svg: &str) -> Vec<(String, f64, f64, String)> {
        let attr = |tag: &str, name: &str| -> Option<String> {
            let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
            Some(tag[start..start + tag[start..].find('"')?].to_string())
        };
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let (head, rest) = t.split_once('>')?;
                let text = rest.split("</text>").next()?.to_string();
                Some((
                    attr(head, "class").unwrap_or_default(),
                    attr(head, "x")?.parse().ok()?,
                    attr(head, "y")?.parse().ok()?,
                    text,
                ))
            })
            .collect()
    }

    #[test]
    fn labels_and_legends_never_cover_each_other_or_the_plot() {
        let band = |from: f64, to: f64, label: &str| Band {
            from,
            to,
            label: label.into(),
            color: "#eee".into(),
        };
        let marker = |x: f64, label: &str| Marker {
            x,
            label: label.into(),
            color: "#b00".into(),
        };
        let line = |name: &str, k: f64| Line {
            name: name.into(),
            color: PALETTE[0].into(),
            points: (0..700).map(|i| (i as f64, k + 1.0 / (1.0 + i as f64))).collect(),
            dots: false,
        };
        let chart = Chart {
            title: "Loss".into(),
            lines: vec![line("train_loss", 0.0), line("val_loss (eval)", 0.1)],
            bands: vec![
                band(0.0, 30.0, "validate"),
                band(30.0, 400.0, "main"),
                band(400.0, 401.0, "diagnose"),
                band(401.0, 600.0, "contract"),
                band(600.0, 700.0, "refine"),
            ],
            markers: [
                "enter_contract",
                "drop_samples",
                "scale_dropout",
                "set_batch",
                "prune",
                "loss_spike",
            ]
            .iter()
            .enumerate()
            .map(|(i, l)| marker(401.0 + i as f64, l))
            .chain([marker(690.0, "int8 kept"), marker(699.0, "distill")])
            .collect(),
            ..Chart::default()
        };
        let svg = chart.svg();
        let top: f64 = svg
            .split(r#"<rect class="band" "#)
            .nth(1)
            .and_then(|r| r.split(r#"y=""#).nth(1))
            .and_then(|r| r.split('"').next())
            .and_then(|y| y.parse().ok())
            .expect("a band's top");
        let labels: Vec<_> = texts(&svg)
            .into_iter()
            .filter(|t| ["band-label", "marker-label", "legend"].contains(&t.0.as_str()))
            .collect();
        assert_eq!(labels.len(), 2 + 5 + 8, "{labels:?}");
        for (i, a) in labels.iter().enumerate() {
            assert!(a.2 < top, "{a:?} is drawn inside the plot (top {top})");
            assert!(
                a.1 >= 0.0 && a.1 + text_width(&a.3) <= W,
                "{a:?} leaves the chart"
            );
            for b in &labels[i + 1..] {
                let same_row = (a.2 - b.2).abs() < ROW_H - 1.0;
                let apart = a.1 + text_width(&a.3) <= b.1 || b.1 + text_width(&b.3) <= a.1;
                assert!(!same_row || apart, "{a:?} overlaps {b:?}");
            }
        }
    }
}
