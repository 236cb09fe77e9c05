//! A self-contained HTML page: inline CSS, inline SVG, nothing fetched from the network.

use std::fmt::Write;

use crate::chart::esc;

/// The page's style sheet.
pub const CSS: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:24px auto;max-width:800px;color:#1a1a1a;line-height:1.4}
h1{font-size:1.5em;margin-bottom:0}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.sub{color:#555;margin-top:2px}.verdict{font-size:1.1em;padding:6px 10px;border-radius:4px;display:inline-block}
.ok{background:#e3f4ea;color:#145a32}.bad{background:#fde8e4;color:#8a1c0c}
table{border-collapse:collapse;width:100%;font-size:.9em}td,th{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;vertical-align:top}
.sev-critical{color:#b00020;font-weight:600}.sev-warning{color:#a15c00;font-weight:600}.sev-info{color:#555}
.ev{color:#666;font-size:.85em}
svg{display:block;margin:8px 0;max-width:100%;height:auto}
svg text{font-family:inherit}svg .title{font-size:13px;font-weight:600}
svg .axis{stroke:#333}svg .tick{stroke:#333}svg .grid{stroke:#eee}
svg .xt{font-size:10px;text-anchor:middle;fill:#333}svg .yt{font-size:10px;text-anchor:end;fill:#333}
svg .xl,svg .yl{font-size:11px;text-anchor:middle;fill:#333}svg .legend{font-size:11px;fill:#333}svg .legend-box{fill:#fff;fill-opacity:.85;stroke:#ddd}
svg .line{fill:none;stroke-width:1.6}svg .band{opacity:.35}svg .band-label{font-size:10px;fill:#444}
svg .marker{stroke-width:1;stroke-dasharray:3 3}svg .marker-label{font-size:10px}
";

/// An HTML page assembled section by section.
#[derive(Debug, Default)]
pub struct Page {
    body: String,
}

impl Page {
    /// A page with a title and a subtitle.
    pub fn new(title: &str, subtitle: &str) -> Page {
        let mut p = Page::default();
        let _ = write!(
            p.body,
            "<h1>{}</h1><p class=\"sub\">{}</p>",
            esc(title),
            esc(subtitle)
        );
        p
    }

    /// A section heading.
    pub fn heading(&mut self, text: &str) {
        let _ = write!(self.body, "<h2>{}</h2>", esc(text));
    }

    /// A verdict line, green when `ok`.
    pub fn verdict(&mut self, text: &str, ok: bool) {
        let class = if ok { "ok" } else { "bad" };
        let _ = write!(self.body, "<p class=\"verdict {class}\">{}</p>", esc(text));
    }

    /// A paragraph of plain text.
    pub fn para(&mut self, text: &str) {
        let _ = write!(self.body, "<p>{}</p>", esc(text));
    }

    /// Raw, already-escaped markup (an SVG chart).
    pub fn raw(&mut self, html: &str) {
        self.body.push_str(html);
    }

    /// A table; cells are plain text, except that a cell starting with `\u{1}` is a CSS class
    /// prefix `\u{1}class\u{1}text`.
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<table><tr>");
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", esc(h));
        }
        self.body.push_str("</tr>");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                match cell.strip_prefix('\u{1}').and_then(|c| c.split_once('\u{1}')) {
                    Some((class, text)) => {
                        let _ = write!(self.body, "<td class=\"{}\">{}</td>", esc(class), esc(text));
                    }
                    None => {
                        let _ = write!(self.body, "<td>{}</td>", esc(cell));
                    }
                }
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</table>");
    }

    /// The page's body so far, to be shown inside another document (a live page).
    pub fn into_body(self) -> String {
        self.body
    }

    /// The complete HTML document.
    pub fn finish(self, title: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{CSS}</style></head><body>{}</body></html>\n",
            esc(title),
            self.body
        )
    }
}

/// A table cell with a CSS class (see [`Page::table`]).
pub fn classed(class: &str, text: &str) -> String {
    format!("\u{1}{class}\u{1}{text}")
}
