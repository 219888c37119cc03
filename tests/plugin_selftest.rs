//! The pytest plugin inside the real base image: every outcome, exception type, budget and
//! collection error lands in events.jsonl exactly as docs/grading.md says
//! (runners/python/selftest/expected.json).

mod support;

#[test]
fn the_plugin_reports_every_outcome_exactly() {
    if !support::docker_ready() {
        return;
    }
    let out = std::process::Command::new("bash")
        .arg(support::root().join("runners/python/selftest/run.sh"))
        .arg(support::BASE_IMAGE)
        .output()
        .expect("run the selftest");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("selftest: OK"), "{text}");
}
