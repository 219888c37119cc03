//! What the scale-out stories and benchmark share: the grader repository GitHub Actions grades
//! are dispatched to, and routing the example task there.

use super::story::{TASK, World, free_port};

pub const GRADER: &str = "infradev-org/grader";
pub const GRADER_INSTALLATION: u64 = 8_888_888;

/// The inputs runners/github-actions/grade.yml declares (`on.workflow_dispatch.inputs`), so
/// the fake refuses a dispatch that the real workflow would.
pub fn workflow_inputs() -> Vec<String> {
    let text = std::fs::read_to_string(super::root().join("runners/github-actions/grade.yml"))
        .expect("the example workflow");
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.trim() == "inputs:" && indent == 4 {
            inside = true;
        } else if inside && !line.trim().is_empty() && indent <= 4 {
            break;
        } else if inside && indent == 6 && line.trim_end().ends_with(':') {
            names.push(line.trim().trim_end_matches(':').to_owned());
        }
    }
    assert!(names.len() >= 5, "inputs of grade.yml: {names:?}");
    names
}

/// Routes the example task to GitHub Actions on the grader repository (installed, with
/// grade.yml registered), the service listening where `result_url` says. `grace_s` and
/// `follow_s`: the follower's `result_grace_s` and `follow_interval_s`.
pub fn route_to_actions(w: &mut World, grace_s: u64, follow_s: u64) {
    let port = free_port();
    w.listen = format!("127.0.0.1:{port}");
    w.extra_config = format!(
        r#"
[backends]
result_url = "http://127.0.0.1:{port}"
result_grace_s = {grace_s}
follow_interval_s = {follow_s}
[[backends.route]]
backend = "github-actions"
tasks = ["{TASK}"]
[backends.github_actions]
repository = "{GRADER}"
workflow = "grade.yml"
"#
    );
    w.fake.add_installation(GRADER_INSTALLATION, &[GRADER]);
    let inputs = workflow_inputs();
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    w.fake
        .add_workflow_with_inputs(GRADER, "grade.yml", &inputs);
}
