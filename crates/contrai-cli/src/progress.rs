//! Progress bars on stderr for the library's [`contrai_data::Progress`] stages; hidden when
//! stderr is not a terminal.

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One bar a stage, replaced when the next stage begins.
#[derive(Default)]
pub struct Bars {
    bar: Mutex<Option<ProgressBar>>,
}

impl contrai_data::Progress for Bars {
    fn stage(&self, name: &str, total: Option<u64>) {
        let bar = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()).with_style(
                ProgressStyle::with_template(
                    "{msg:>28} [{bar:30}] {percent:>3}% {elapsed_precise} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            ),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        bar.set_message(shorten(name));
        bar.enable_steady_tick(Duration::from_millis(200));
        if let Ok(mut slot) = self.bar.lock()
            && let Some(old) = slot.replace(bar)
        {
            old.finish_and_clear();
        }
    }

    fn inc(&self, n: u64) {
        if let Ok(slot) = self.bar.lock()
            && let Some(b) = slot.as_ref()
        {
            b.inc(n);
        }
    }

    fn finish(&self) {
        if let Ok(mut slot) = self.bar.lock()
            && let Some(b) = slot.take()
        {
            b.finish_and_clear();
        }
    }
}

/// Keeps the end of long stage names (paths) so the bar fits.
fn shorten(name: &str) -> String {
    const MAX: usize = 28;
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= MAX {
        name.to_string()
    } else {
        format!("…{}", chars[chars.len() - (MAX - 1)..].iter().collect::<String>())
    }
}
