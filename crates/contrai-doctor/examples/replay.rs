//! Replays a log through the live API, point by point, as a trainer would feed it.
//!
//! `cargo run --release -p contrai-doctor --example replay -- PATH`

use std::time::Instant;

use contrai_doctor::{Doctor, DoctorConfig, read_path};

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: replay PATH");
        std::process::exit(2);
    };
    // REPLAY_REPEAT=N re-reads N times (for profiling); the reported time is per read.
    let repeat: u32 = std::env::var("REPLAY_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let t0 = Instant::now();
    let mut runs = Vec::new();
    for _ in 0..repeat {
        runs = match read_path(std::path::Path::new(&path), None) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        };
    }
    let t_read = t0.elapsed() / repeat;
    let t1 = Instant::now();
    let mut points = 0usize;
    for run in &runs {
        let mut doctor = Doctor::new(DoctorConfig::default());
        doctor.set_hints(run.hints.clone());
        let mut all: Vec<_> = run
            .series
            .iter()
            .flat_map(|(s, d)| d.points.iter().map(move |p| (*s, *p)))
            .collect();
        all.sort_by_key(|(s, p)| (p.step, *s));
        points += all.len();
        for (series, p) in all {
            for f in doctor.push(series, p.step, p.value) {
                println!("[{}] step {}: {} ({})", run.name, p.step, f.label, f.severity);
            }
        }
        for f in doctor.finish() {
            println!("[{}] end: {} ({})", run.name, f.label, f.severity);
        }
    }
    eprintln!(
        "{points} points; read {:.3} ms, diagnose {:.3} ms",
        t_read.as_secs_f64() * 1e3,
        t1.elapsed().as_secs_f64() * 1e3
    );
}
