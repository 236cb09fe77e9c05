//! `contrai recipe init` for a pretrained checkpoint, full and LoRA, checked by `contrai recipe check`.

use crate::util;

use util::{TINY_BERT, TempDir, contrai};

#[test]
fn the_pretrained_recipes_check_and_lora_adds_its_section_and_lrs() {
    let dir = TempDir::new();
    for (lora, lr) in [(false, "lr = 5e-5"), (true, "lr = 5e-4")] {
        let mut args = vec!["recipe", "init", "--pretrained", TINY_BERT];
        if lora {
            args.push("--lora");
        }
        let out = contrai(&args).output();
        out.assert_success();
        let text = out.stdout_utf8();
        assert_eq!(text.contains("[model.lora]"), lora, "{text}");
        assert!(text.contains(lr), "{text}");
        let path = dir.write(format!("r{lora}.toml"), text);
        let check = contrai(["recipe", "check"]).arg(&path).output();
        check.assert_success();
        let resolved = check.stdout_utf8();
        assert_eq!(resolved.contains("targets = ["), lora, "{resolved}");
    }
    contrai(["recipe", "init", "--lora"])
        .output()
        .assert_failure()
        .assert_stderr_contains(&["--pretrained"]);
}

#[test]
fn the_recipe_for_a_pytorch_job_leaves_main_steps_to_it_and_checks() {
    let dir = TempDir::new();
    for framework in ["hf", "lightning"] {
        let out = contrai(["recipe", "init", "--for", framework]).output();
        out.assert_success();
        let text = out.stdout_utf8();
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with("steps = 400")),
            "{text}"
        );
        assert!(text.contains("# steps = 400"), "{text}");
        let path = dir.write(format!("{framework}.toml"), text);
        contrai(["recipe", "check"]).arg(&path).output().assert_success();
    }
    contrai(["recipe", "init", "--for", "keras"])
        .output()
        .assert_failure()
        .assert_stderr_contains(&["hf", "lightning"]);
}
