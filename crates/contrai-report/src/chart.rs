//! Line charts as inline SVG: axes with readable ticks, a legend, shaded bands and markers.

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
}

const W: f64 = 760.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;

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
                .chain(self.bands.iter().flat_map(|b| [b.from, b.to])),
        );
        let positive = pts.iter().all(|p| p.1 > 0.0);
        let (ymin, ymax) = extent(pts.iter().map(|p| p.1));
        let log = self
            .log_y
            .unwrap_or(positive && ymin > 0.0 && ymax / ymin > 100.0)
            && positive;
        let scale = Scale::new(x0, x1, ymin, ymax, log);
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{}">"#,
            esc(&self.title)
        );
        let _ = write!(
            s,
            r#"<text x="{LEFT}" y="18" class="title">{}</text>"#,
            esc(&self.title)
        );
        for b in &self.bands {
            let (a, z) = (scale.x(b.from), scale.x(b.to));
            let _ = write!(
                s,
                r#"<rect class="band" x="{a:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{}"/><text class="band-label" x="{:.1}" y="{:.1}">{}</text>"#,
                (z - a).max(0.5),
                H - TOP - BOTTOM,
                b.color,
                a + 3.0,
                TOP + 11.0,
                esc(&b.label)
            );
        }
        self.axes(&mut s, &scale);
        for l in &self.lines {
            line_path(&mut s, l, &scale);
        }
        let _ = write!(
            s,
            r#"<rect class="legend-box" x="{:.1}" y="{:.1}" width="176" height="{:.1}"/>"#,
            W - RIGHT - 176.0,
            TOP + 1.0,
            8.0 + 16.0 * self.lines.len() as f64
        );
        for (i, l) in self.lines.iter().enumerate() {
            legend(&mut s, i, l);
        }
        // Labels of nearby markers go up a row each instead of printing over one another.
        let mut rows_end = [f64::NEG_INFINITY; 6];
        let mut order: Vec<&Marker> = self.markers.iter().collect();
        order.sort_by(|a, b| a.x.total_cmp(&b.x));
        for m in order {
            let x = scale.x(m.x);
            let row = rows_end
                .iter()
                .position(|&end| end < x)
                .unwrap_or(rows_end.len() - 1);
            rows_end[row] = x + 4.0 + 6.0 * m.label.chars().count() as f64;
            let _ = write!(
                s,
                r#"<line class="marker" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="{}"/><text class="marker-label" x="{:.1}" y="{:.1}" fill="{}">{}</text>"#,
                H - BOTTOM,
                m.color,
                x + 2.0,
                H - BOTTOM - 4.0 - 11.0 * row as f64,
                m.color,
                esc(&m.label)
            );
        }
        s.push_str("</svg>");
        s
    }

    fn axes(&self, s: &mut String, sc: &Scale) {
        let (bx, by) = (H - BOTTOM, W - RIGHT);
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" y1="{bx}" x2="{by}" y2="{bx}"/>"#
        );
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bx}"/>"#
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
        for t in yticks {
            let y = sc.y(t);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{by}" y2="{y:.1}"/><text class="yt" x="{:.1}" y="{:.1}">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                fmt_num(t)
            );
        }
        let scale_note = if sc.log { " (log scale)" } else { "" };
        let _ = write!(
            s,
            r#"<text class="xl" x="{:.1}" y="{:.1}">{}</text>"#,
            (LEFT + by) / 2.0,
            H - 6.0,
            esc(&self.x_label)
        );
        let _ = write!(
            s,
            r#"<text class="yl" transform="translate(14 {:.1}) rotate(-90)">{}{scale_note}</text>"#,
            (TOP + bx) / 2.0,
            esc(&self.y_label)
        );
    }
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

fn legend(s: &mut String, i: usize, l: &Line) {
    let x = W - RIGHT - 170.0;
    let y = TOP + 14.0 + 16.0 * i as f64;
    let _ = write!(
        s,
        r#"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text class="legend" x="{:.1}" y="{:.1}">{}</text>"#,
        y - 4.0,
        x + 18.0,
        y - 4.0,
        l.color,
        x + 24.0,
        y,
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
}

impl Scale {
    fn new(x0: f64, x1: f64, y0: f64, y1: f64, log: bool) -> Scale {
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
        Scale { x0, x1, y0, y1, log }
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
        H - BOTTOM - f * (H - TOP - BOTTOM)
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
}
