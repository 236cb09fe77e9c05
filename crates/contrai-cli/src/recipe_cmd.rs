//! `contrai recipe`: print the default recipe, or check one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use contrai_recipe::{Recipe, default_recipe};

/// The `contrai recipe` subcommands.
#[derive(Subcommand)]
pub enum RecipeCommand {
    /// Print the default recipe, every key with a comment (redirect it to a file and edit).
    ///
    /// Example: contrai recipe init > spam.toml
    Init,
    /// Validate a recipe and print it resolved, every default filled in.
    Check {
        /// The recipe file.
        path: PathBuf,
    },
}

/// Runs a `contrai recipe` subcommand.
pub fn run(cmd: RecipeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RecipeCommand::Init => print!("{}", default_recipe()),
        RecipeCommand::Check { path } => {
            let recipe = Recipe::from_file(&path)?;
            print!("{}", recipe.to_toml());
            eprintln!(
                "{}: valid (effective batch {})",
                path.display(),
                recipe.main.effective_batch()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
