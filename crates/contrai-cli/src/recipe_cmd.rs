//! `contrai recipe`: print the default recipe, or check one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use contrai_recipe::{Checkpoint, Recipe, default_recipe, job_recipe, pretrained_recipe};

/// The `contrai recipe` subcommands.
#[derive(Subcommand)]
pub enum RecipeCommand {
    /// Print the default recipe, every key with a comment (redirect it to a file and edit).
    ///
    /// With --pretrained DIR: the recipe for fine-tuning that Hugging Face model directory
    /// (config.json, model.safetensors, tokenizer.json): kind = "bert", its pooling, sequence
    /// length and dropout, fine-tuning LRs with warmup, pruning by its parameter names. With
    /// --lora as well: a [model.lora] section (rank 8, alpha 16, query and value adapted) and
    /// LoRA's LRs.
    ///
    /// With --for hf or --for lightning: the recipe for a Hugging Face or Lightning job, which
    /// leaves main.steps to the job: its own max_steps (or epochs × batches) then hold main,
    /// contract and refine at the recipe's shares (the decision log says how it was laid out).
    ///
    /// Example: contrai recipe init > spam.toml
    ///          contrai recipe init --for hf > recipe.toml
    ///          contrai recipe init --pretrained models/all-MiniLM-L6-v2 > minilm.toml
    ///          contrai recipe init --pretrained models/all-MiniLM-L6-v2 --lora > minilm-lora.toml
    Init {
        /// A BERT-family model directory to fine-tune.
        #[arg(long, value_name = "DIR")]
        pretrained: Option<PathBuf>,
        /// Fine-tune through LoRA adapters (needs --pretrained).
        #[arg(long, requires = "pretrained")]
        lora: bool,
        /// The recipe for a job of this framework (the Python package's callbacks).
        #[arg(long = "for", value_name = "FRAMEWORK", conflicts_with = "pretrained")]
        job: Option<Framework>,
    },
    /// Validate a recipe and print it resolved, every default filled in.
    Check {
        /// The recipe file.
        path: PathBuf,
    },
}

/// The frameworks whose jobs run the lifecycle through the Python package.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Framework {
    /// A Hugging Face `Trainer` (and TRL's trainers built on it).
    Hf,
    /// A Lightning `Trainer`.
    Lightning,
}

/// Runs a `contrai recipe` subcommand.
pub fn run(cmd: RecipeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        // Both frameworks' callbacks take the same recipe: the budget comes from the job.
        RecipeCommand::Init {
            pretrained: None,
            job: Some(Framework::Hf | Framework::Lightning),
            ..
        } => print!("{}", job_recipe()),
        RecipeCommand::Init { pretrained: None, .. } => print!("{}", default_recipe()),
        RecipeCommand::Init {
            pretrained: Some(dir),
            lora,
            ..
        } => {
            let c = contrai_bert::ModelDir::open(&dir)?.config;
            print!(
                "{}",
                pretrained_recipe(
                    &Checkpoint {
                        dir: dir.display().to_string(),
                        max_positions: c.max_position_embeddings,
                        dropout: c.hidden_dropout_prob,
                        sentence_encoder: dir.join("modules.json").is_file(),
                    },
                    lora
                )
            );
        }
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
