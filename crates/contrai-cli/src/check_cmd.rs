//! `contrai check`: a recipe's pre-flight check against the lifecycle's rules, before step 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use contrai_data::split::Manifest;
use contrai_lifecycle::preflight::{self, Finding, JobFacts, Severity};
use contrai_recipe::Recipe;

/// Arguments of `contrai check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The recipe file.
    recipe: PathBuf,
    /// Print JSON: {"recipe", "findings": [{"kind", "severity", "message", "evidence"}]}.
    #[arg(long)]
    json: bool,
}

/// Runs `contrai check`: exit 0 with no error finding, 1 with one (warnings alone exit 0).
pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let recipe = Recipe::from_file(&args.recipe)?;
    let facts = facts(&recipe)?;
    let findings = preflight::check(&facts);
    if args.json {
        let out = serde_json::json!({"recipe": args.recipe, "findings": findings});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_human(&args.recipe, &findings);
    }
    let error = findings.iter().any(|f| f.severity == Severity::Error);
    Ok(if error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The recipe's facts; when its data is a split directory, the partitions that directory holds
/// (an empty or missing one counts as absent, as the engine reads it).
fn facts(recipe: &Recipe) -> anyhow::Result<JobFacts> {
    let mut facts = JobFacts::from_recipe(recipe);
    let dir = Path::new(&recipe.data.path);
    let manifest = dir.join("manifest.json");
    if recipe.data.path.is_empty() || !manifest.is_file() {
        return Ok(facts);
    }
    let bytes = std::fs::read(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let m: Manifest = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a Contrai split manifest", manifest.display()))?;
    let holds = |name: &str| m.partitions.iter().any(|p| p.name == name && p.count > 0);
    facts.eval_split = Some(holds("val"));
    facts.holdout = Some(holds("holdout"));
    Ok(facts)
}

/// One line a finding, then a summary line.
fn print_human(path: &Path, findings: &[Finding]) {
    for f in findings {
        println!("{}: {}: {}", f.severity.as_str(), f.kind.as_str(), f.message);
    }
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    match findings.len() {
        0 => println!("{}: within the rules (no finding)", path.display()),
        n => println!(
            "{}: {n} finding{} ({errors} error{})",
            path.display(),
            if n == 1 { "" } else { "s" },
            if errors == 1 { "" } else { "s" }
        ),
    }
}
