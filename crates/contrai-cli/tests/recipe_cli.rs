//! `contrai recipe init` for a pretrained checkpoint, full and LoRA, checked by `contrai recipe check`.

use std::process::Command;

fn contrai(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_contrai"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_pretrained_recipes_check_and_lora_adds_its_section_and_lrs() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../contrai-bert/tests/fixtures/tiny-bert"
    );
    let dir = tempfile::tempdir().unwrap();
    for (lora, lr) in [(false, "lr = 5e-5"), (true, "lr = 5e-4")] {
        let mut args = vec!["recipe", "init", "--pretrained", fixture];
        if lora {
            args.push("--lora");
        }
        let out = contrai(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.contains("[model.lora]"), lora, "{text}");
        assert!(text.contains(lr), "{text}");
        let path = dir.path().join(format!("r{lora}.toml"));
        std::fs::write(&path, &text).unwrap();
        let check = contrai(&["recipe", "check", path.to_str().unwrap()]);
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
        let resolved = String::from_utf8(check.stdout).unwrap();
        assert_eq!(resolved.contains("targets = ["), lora, "{resolved}");
    }
    let out = contrai(&["recipe", "init", "--lora"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pretrained"));
}
