//! `contrai plan`: the phase table, the calendar of a long programme, cost and size advice.

use std::path::PathBuf;
use std::process::ExitCode;

use contrai_recipe::Recipe;
use contrai_recipe::calendar::Calendar;
use contrai_run::Plan;
use serde::Serialize;

/// Arguments of `contrai plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// The recipe [default: the built-in default recipe].
    recipe: Option<PathBuf>,
    /// Lay the programme over this many weeks (20: weeks 1–3 validate, 4–12 main, 13–14
    /// diagnose, 15–18 contract, 19–20 refine).
    #[arg(long, default_value_t = 20)]
    weeks: u32,
    /// Cost of one day of the programme (any currency), for the total.
    #[arg(long, value_name = "X")]
    cost_per_day: Option<f64>,
    /// Plan 4-week sprints, each ending with a recovery window, for preemptible or flaky machines.
    #[arg(long)]
    unstable_infra: bool,
    /// Measured milliseconds an optimizer step, for wall-clock estimates of each phase.
    #[arg(long, value_name = "MS", conflicts_with = "calibrate")]
    step_ms: Option<f64>,
    /// Measure the step time instead: train the recipe's model for 20 steps on random tokens here.
    #[arg(long)]
    calibrate: bool,
    /// Training samples, for epochs and data-size advice.
    #[arg(long, value_name = "N")]
    train_samples: Option<u64>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

/// Steps timed by `--calibrate` (after a short warm-up).
const CALIBRATION_STEPS: usize = 20;

/// Everything `contrai plan` says.
#[derive(Serialize)]
struct Output {
    calibration: Option<contrai_train::calibrate::Calibration>,
    plan: Plan,
    calendar: Calendar,
    wall_clock_s: Option<Vec<(String, f64)>>,
}

/// Runs `contrai plan`.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let recipe = match &args.recipe {
        Some(p) => contrai_train::setup::sized(Recipe::from_file(p)?)?,
        None => Recipe::default(),
    };
    if let Some(ms) = args.step_ms.filter(|ms| !ms.is_finite() || *ms <= 0.0) {
        anyhow::bail!("--step-ms {ms} must be a positive number of milliseconds");
    }
    let plan = contrai_lifecycle::planner::plan(&recipe, args.train_samples, &[]);
    let calendar = Calendar::new(args.weeks, args.unstable_infra, args.cost_per_day)?;
    let calibration = if args.calibrate {
        eprintln!("calibrating: {CALIBRATION_STEPS} training steps of the recipe's model …");
        Some(contrai_train::calibrate::calibrate(&recipe, CALIBRATION_STEPS)?)
    } else {
        None
    };
    // An optimizer step is `accumulate` micro-batches.
    let step_ms = args.step_ms.or(calibration
        .as_ref()
        .map(|c| c.ms_per_step * recipe.main.accumulate as f64));
    let wall_clock_s = step_ms.map(|ms| {
        plan.phases
            .iter()
            .map(|p| (p.name.to_string(), p.steps as f64 * ms / 1000.0))
            .collect()
    });
    let out = Output {
        calibration,
        plan,
        calendar,
        wall_clock_s,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_human(&out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(o: &Output) {
    let p = &o.plan;
    println!(
        "{} optimizer steps (contract {:.0} % of them), eval every {}, checkpoint every {}; {} parameters{}\n",
        p.total_steps,
        100.0 * p.contract_share,
        p.eval_every,
        p.checkpoint_every,
        p.parameters,
        if p.gradient_checkpointing {
            "; gradient checkpointing (each block recomputed in the backward pass)"
        } else {
            ""
        }
    );
    println!(
        "{:<9} {:>7} {:>7} {:>6} {:>9}  learning rate",
        "phase", "from", "steps", "batch", "samples"
    );
    for ph in &p.phases {
        let lr: Vec<String> = ph
            .lr
            .iter()
            .map(|s| {
                format!(
                    "{} {:.2e}→{:.2e} ({}–{})",
                    s.shape, s.lr_start, s.lr_end, s.from_step, s.to_step
                )
            })
            .collect();
        println!(
            "{:<9} {:>7} {:>7} {:>6} {:>9}  {}",
            ph.name,
            ph.start_step,
            ph.steps,
            ph.batch,
            ph.samples,
            lr.join(", ")
        );
    }
    if let Some(c) = &o.calibration {
        println!(
            "\ncalibrated: {:.1} ms a micro-batch step (median of {} steps on this machine)",
            c.ms_per_step, c.steps
        );
    }
    if let Some(w) = &o.wall_clock_s {
        let parts: Vec<String> = w
            .iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(n, s)| format!("{n} {}", hms(*s)))
            .collect();
        println!("\nwall clock at the measured step time: {}", parts.join(", "));
    }
    let c = &o.calendar;
    println!("\ncalendar ({} weeks):", c.weeks);
    for ph in &c.phases {
        println!("  weeks {:>2}–{:<2} {}", ph.first_week, ph.last_week, ph.name);
    }
    for s in &c.sprints {
        println!(
            "  sprint {}: weeks {}–{}, last {} days kept for recovery",
            s.number, s.first_week, s.last_week, s.recovery_days
        );
    }
    if let Some(cost) = c.cost {
        println!("  total cost: {cost:.2} over {} days", c.days);
    }
    if !p.advice.is_empty() {
        println!("\nadvice:");
        for a in &p.advice {
            println!("  - {a}");
        }
    }
}

fn hms(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
