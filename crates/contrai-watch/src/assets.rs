//! The page around the live part: the report's style sheet, a status bar, and the script that
//! takes each update from the event stream and shows the raw values under the pointer.

use contrai_report::chart::esc;
use contrai_report::page::CSS;

use crate::board::Snapshot;

/// What the live page adds to the report's style.
const WATCH_CSS: &str = "
body{max-width:1000px}.waiting{background:#fff6db;padding:6px 10px;border-radius:4px}
#conn{color:#8a1c0c;font-size:.9em}
#tip{position:absolute;display:none;background:#fff;border:1px solid #bbb;border-radius:4px;padding:4px 8px;font-size:12px;pointer-events:none;box-shadow:0 2px 6px rgba(0,0,0,.15);white-space:nowrap}
";

/// Follows the event stream and shows the raw values under the pointer (fetched from the server:
/// the charts draw a few thousand of a million points).
const SCRIPT: &str = r#"
(function () {
  const token = new URLSearchParams(location.search).get('token');
  const withToken = (u) => token ? u + (u.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(token) : u;
  const live = document.getElementById('live'), conn = document.getElementById('conn'), tip = document.getElementById('tip');
  const apply = (d) => {
    live.innerHTML = d.html;
    document.title = d.title;
    document.body.dataset.version = d.version;
    document.body.dataset.lastStep = d.last_step;
  };
  const es = new EventSource(withToken('/events'));
  es.addEventListener('update', (e) => apply(JSON.parse(e.data)));
  es.onopen = () => { conn.textContent = ''; };
  es.onerror = () => { conn.textContent = 'connection to contrai watch lost: retrying…'; };
  let busy = false;
  live.addEventListener('mousemove', (ev) => {
    const svg = ev.target.closest && ev.target.closest('svg[data-x0]');
    const section = svg && svg.closest('[data-run]');
    if (!section) { tip.style.display = 'none'; return; }
    const d = svg.dataset, box = svg.getBoundingClientRect();
    const sx = (ev.clientX - box.left) * svg.viewBox.baseVal.width / box.width;
    if (sx < +d.left || sx > +d.right) { tip.style.display = 'none'; return; }
    const x = +d.x0 + (sx - d.left) / (d.right - d.left) * (d.x1 - d.x0);
    if (busy) return;
    busy = true;
    const run = section.dataset.run === '*' ? '' : '&run=' + section.dataset.run;
    fetch(withToken('/values?x=' + x + run)).then((r) => r.json()).then((v) => {
      tip.replaceChildren(...v.values.map((p) => {
        const row = document.createElement('div');
        row.textContent = p.run + ' · ' + p.series + ' (' + p.tag + ') at ' + p.step + ': ' + p.value;
        return row;
      }));
      tip.style.left = (ev.pageX + 14) + 'px';
      tip.style.top = (ev.pageY + 14) + 'px';
      tip.style.display = v.values.length ? 'block' : 'none';
    }).catch(() => {}).finally(() => { busy = false; });
  });
  live.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
})();
"#;

/// The whole page, showing `snap` until the first update arrives.
pub fn page(snap: &Snapshot) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{CSS}{WATCH_CSS}</style></head><body data-version=\"{}\" data-last-step=\"{}\"><p id=\"conn\"></p><div id=\"live\">{}</div><div id=\"tip\"></div><script>{SCRIPT}</script></body></html>\n",
        esc(&snap.title),
        snap.version,
        snap.last_step,
        snap.html
    )
}
