//! The headless-Chromium harness against a local page whose script counts up: waiting, evaluating,
//! an exception, a screenshot, and no chromium left behind once the browser is dropped.

use std::time::{Duration, Instant};

use contrai_testkit::browser::Browser;

const PAGE: &str = "<!doctype html><html><body><h1>Counting</h1><script>
document.body.dataset.n = 0;
setInterval(() => { document.body.dataset.n = Number(document.body.dataset.n) + 1; }, 200);
</script></body></html>";

/// The command lines of running processes, by pid (from /proc/*/cmdline; zombies have none).
fn processes() -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")))
        })
        .collect()
}

/// The `--user-data-dir` of the chromium this test process started (its child).
fn profile_of_our_chromium() -> Option<String> {
    let me = std::process::id().to_string();
    processes().into_iter().find_map(|(pid, cmd)| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim();
        let dir = cmd.split(' ').find_map(|a| a.strip_prefix("--user-data-dir="))?;
        (ppid == me).then(|| dir.to_string())
    })
}

#[test]
fn drives_a_page_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("count.html");
    std::fs::write(&html, PAGE).unwrap();
    let started = Instant::now();
    let Some(mut browser) = Browser::open(&format!("file://{}", html.display())) else {
        return;
    };
    eprintln!("open: {:?}", started.elapsed());

    let waited = browser.wait_for("Number(document.body.dataset.n) >= 5", Duration::from_secs(5));
    eprintln!("wait_for: {waited:?}");
    assert!(waited.is_ok(), "{waited:?}");
    assert_eq!(browser.eval("1+1"), Ok(serde_json::json!(2)));
    let thrown = browser.eval("throw new Error('x')");
    assert!(
        thrown.as_ref().is_err_and(|e| e.starts_with("Error: x")),
        "{thrown:?}"
    );

    let png = dir.path().join("page.png");
    browser.screenshot(&png).unwrap();
    let png = std::fs::read(&png).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(
        png[16..20],
        1000u32.to_be_bytes(),
        "the width in the PNG's header"
    );

    let profile = profile_of_our_chromium().expect("chromium is a child of this test");
    drop(browser);
    let left: Vec<_> = processes()
        .into_iter()
        .filter(|(_, cmd)| cmd.contains(&profile))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    eprintln!("total: {:?}", started.elapsed());
}
