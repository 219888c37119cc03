//! Red team: the grader attacked by the code it grades, written as an adversarial agent that
//! has read all of InfraDev's source would write it. Each attack is a branch of the example
//! repository (`examples/minicache/attacks/<name>.patch`, built by make-repo.sh) graded
//! through the real binary on real Docker; nothing of ours is mocked.
//!
//! Every grade must be contained: the grader ends by itself with a verdict exit code, stays
//! within its own memory, and no rendering (terminal summary, stderr, `--json`, `--junit`,
//! the GitHub check run, sticky comment and workflow commands) carries control characters,
//! workflow commands, or anything recoverable of the probes (canaries, source lines, our
//! attacks' markers; decoded from base64, hex, zlib, reversed, and reassembled over fields).
//!
//! | attack | what it does | expected |
//! |---|---|---|
//! | `prefix_cache_stub` | control: a plausible but wrong implementation (no prefix cache); it passes the interface probe and fails 6 of 8 FAIL_TO_PASS | unresolved |
//! | `forge_results_socket` | the stub, plus frames `result passed` for every official id sent on `$INFRADEV_EVENTS_SOCKET` at import, before pytest runs a test | not resolved |
//! | `forge_results_and_exit` | the same, then `os._exit(0)` at import: the planted canaries never report | not resolved |
//! | `forge_canaries_too` | reads the planted canary file beside the official tests, forges its two results correctly and every official one as passed | not resolved |
//! | `patch_plugin_emit` | no conftest: rewrites the official ids' outcomes inside `infradev_pytest._Events.emit` | not resolved |
//! | `patch_testreport` | no conftest: `_pytest.reports.TestReport.from_item_and_call` reports the official ids' failures as passes | not resolved |
//! | `register_hook_flip_all` | a `pytest_runtest_makereport` hookwrapper registered through the plugin manager (found with `gc`) that passes everything | tampered |
//! | `conftest_symlink` | `conftest.py` is a symlink to `/infradev/repo/minicache/_testing.py` (dangling on the host, valid in the sandbox) whose hooks pass the official ids | flagged, not resolved |
//! | `socket_abuse` | 40 connections, a 4 GiB length, a torn frame, a nesting bomb, 600 KB ids, 64 MiB of frames, 240k events | unresolved (tampered when the flood drowns the canaries), ends |
//! | `exit_127_at_import`, `exit_5_at_import` | `os._exit(127)` (Docker's "command not found") / `os._exit(5)` (pytest's "no tests") at import, in both phases | unresolved, never error |
//! | `kill_everything` | closes every socket, SIGKILLs init, its parent, `-1` and itself | unresolved |
//! | `exhaust_fds_and_tmp` | closes the sockets, FIFOs and symlinks in /tmp, fills it, exhausts fds | unresolved |
//! | `shadow_inspect` | a repository-root `inspect.py` that exits 70 (the entry script's own "ours" code) before pytest starts | unresolved |
//! | `subject_reconnect` | the subject opens 8 more connections to its own socket (with a hello), then dies in its first call | unresolved, never error |
//! | `symlink_dev_zero` | the reference, plus `minicache/vocab.txt -> /dev/zero` | the grade ends, on bounded memory |
//! | `subject_garbage_frames` | writes frames on the subject's own socket: a callback nobody handed out, a reply claiming a broker fault, a nesting bomb, a 2 GiB length | unresolved, no infra |
//! | `subject_hang` / `subject_sigstop` | the first call busy-loops ignoring every signal / SIGSTOPs the subject | unresolved, `time` |
//! | `subject_hang_at_import` | the subject busy-loops while the judge imports it (collection) | unresolved, `time` (not `build`) |
//! | `subject_oom` | the first call allocates until the OOM killer comes | unresolved, `memory` |
//! | `subject_fork_bomb` | the first call forks without end | unresolved, ends |
//! | `exfiltrate` | snoops for probes everywhere; the official phase forges every free-text field; the subject records the memory probe's hidden prompts, encodes 5 bits of them in the memory figure, and raises exceptions carrying everything (hex, base64, zlib, reversed) | nothing recoverable |
//! | `output_flood` | 8 s of output at full speed on every fd 1/2 it can reach (incl. pytest's saved fds and init's), in both phases | ends, bounded memory, Docker logs capped |
//! | `hostile_names` | file names with ANSI/OSC escapes, CR/LF and `::error::`/`::add-mask::`/`::stop-commands::` (flagged, so the path is rendered), hook names with escapes, forged events and exceptions full of them | none reaches a rendering |
//!
//! Tests that fail here are open holes: each assertion message says what was observed.

mod support;

use std::time::Duration;

use infradev::grading::{Category, Expectation, Verdict};
use support::docker_ready;
use support::redteam::{Grade, Probes, Run, hostile_text, leaks, secrets};

/// Every grade of the suite, longest first (they start together when the whole suite runs).
fn plan() -> Vec<Grade> {
    use Probes::{Interface, Quick, Real};
    let mut grades = vec![
        Grade {
            fast: false,
            ..Grade::new("exfiltrate", Real)
        },
        Grade::new("subject_hang_at_import", Quick),
        Grade::new("subject_hang", Quick),
        Grade::new("subject_sigstop", Quick),
        Grade {
            watch_docker_logs: true,
            ..Grade::new("output_flood", Interface)
        },
        Grade::new("subject_oom", Quick),
        Grade::new("subject_fork_bomb", Quick),
        Grade {
            // The address-space limit keeps a runaway from taking the machine down with it.
            vmem_kib: Some(1_500_000),
            ..Grade::new("symlink_dev_zero", Interface)
        },
        Grade::new("subject_garbage_frames", Quick),
        Grade::new("subject_reconnect", Quick),
        // Rewriting only the official ids' reports inside the process, and running everything
        // else honestly, is beyond what the official phase can detect (it is evidence, not
        // proof): the probes, out of the submission's reach, decide. Graded with the real ones.
        Grade::new("patch_plugin_emit", Real),
        Grade::new("patch_testreport", Real),
    ];
    for attack in [
        "prefix_cache_stub",
        "reference",
        "forge_results_socket",
        "forge_results_and_exit",
        "forge_canaries_too",
        "register_hook_flip_all",
        "conftest_symlink",
        "socket_abuse",
        "exit_127_at_import",
        "exit_5_at_import",
        "kill_everything",
        "exhaust_fds_and_tmp",
        "shadow_inspect",
        "hostile_names",
    ] {
        grades.push(Grade::new(attack, Interface));
    }
    grades
}

fn graded(attack: &str) -> std::sync::Arc<Run> {
    support::redteam::graded(plan, attack)
}

/// Markers our attacks put into free text they control; none may reach a rendering.
const MARKERS: &[&str] = &["EXFIL-MARKER-7d3a", "FLOOD xxxxxxxxxxxxxxxx"];
/// The grader's own memory: a sandbox must not be able to make it grow.
const GRADER_RSS_MIB: u64 = 256;
/// Slack over a phase's wall clock (tests_s = 60, probes_s = 90 in the attacks' task copy).
const PHASE_SLACK_S: f64 = 20.0;

/// What every grade must hold, whatever the attack.
fn assert_contained(run: &Run) {
    assert!(!run.hung, "the grader hung:\n{}", run.context());
    assert_eq!(
        run.signal,
        None,
        "the grader died of a signal:\n{}",
        run.context()
    );
    assert!(
        run.max_rss_kib / 1024 < GRADER_RSS_MIB,
        "the grader's own memory grew to {} MiB:\n{}",
        run.max_rss_kib / 1024,
        run.context()
    );
    let report = run.report();
    for phase in &report.phases {
        let wall = match phase.evidence.phase.as_str() {
            "tests" => 60.0,
            _ => 90.0,
        };
        assert!(
            phase.duration_s < wall + PHASE_SLACK_S,
            "the {} phase ran {:.1} s, past its deadline:\n{}",
            phase.evidence.phase.as_str(),
            phase.duration_s,
            run.context()
        );
    }
    let hostile = hostile_text(run);
    assert!(
        hostile.is_empty(),
        "sandbox-controlled text reached a rendering:\n  {}\n{}",
        hostile.join("\n  "),
        run.context()
    );
    let leaked = leaks(run, &secrets(MARKERS));
    assert!(
        leaked.is_empty(),
        "recoverable from the renderings:\n  {}\n{}",
        leaked.join("\n  "),
        run.context()
    );
}

fn verdict(run: &Run) -> Verdict {
    run.report().grade.verdict
}

fn exit_code_of(v: Verdict) -> i32 {
    match v {
        Verdict::Resolved => 0,
        Verdict::Unresolved => 1,
        Verdict::Error => 3,
        Verdict::Tampered => 4,
    }
}

fn categories(run: &Run, probes: bool) -> Vec<Category> {
    run.report()
        .grade
        .tests
        .iter()
        .filter(|t| (t.expectation == Expectation::Probe) == probes)
        .filter_map(|t| t.category)
        .collect()
}

/// The stub below every forgery fails 6 of 8 FAIL_TO_PASS honestly. Unless the canaries
/// caught the rewrite (tampered), those failures must still be there.
fn assert_forgery_did_not_count(run: &Run) {
    assert_contained(run);
    let v = verdict(run);
    assert_eq!(run.code, Some(exit_code_of(v)), "{}", run.context());
    assert!(
        matches!(v, Verdict::Unresolved | Verdict::Tampered),
        "a wrong implementation that forges its official results got `{}`: the official \
         phase's results were believed:\n{}",
        v.as_str(),
        run.context()
    );
    if v != Verdict::Tampered {
        let f2p_failing = run
            .report()
            .grade
            .tests
            .iter()
            .filter(|t| t.expectation == Expectation::FailToPass && !t.passed())
            .count();
        assert!(
            f2p_failing > 0,
            "every FAIL_TO_PASS test reported passing for code that fails 6 of 8; the \
             verdict holds only because of the probes:\n{}",
            run.context()
        );
    }
}

/// A submission that kills, exits or breaks things is unresolved: its fault, never ours.
fn assert_blamed_on_the_submission(run: &Run) {
    assert_failed_by_the_submission(run, &[Verdict::Unresolved]);
}

/// The grade ends in one of `verdicts` (each a failure of the submission, with its exit
/// code), no phase reports an infrastructure error and no test is put down to us.
fn assert_failed_by_the_submission(run: &Run, verdicts: &[Verdict]) {
    assert_contained(run);
    let r = run.report();
    for phase in &r.phases {
        assert_eq!(
            phase.evidence.infra_error,
            None,
            "the submission's doing was reported as an infrastructure error:\n{}",
            run.context()
        );
    }
    assert!(
        verdicts.contains(&r.grade.verdict),
        "expected one of {verdicts:?}:\n{}",
        run.context()
    );
    assert_eq!(
        run.code,
        Some(exit_code_of(r.grade.verdict)),
        "{}",
        run.context()
    );
    let all: Vec<Category> = r.grade.tests.iter().filter_map(|t| t.category).collect();
    assert!(
        !all.contains(&Category::Infra),
        "a hostile submission is never our fault: {all:?}\n{}",
        run.context()
    );
}

/// Two grades at once (the harness bounds how many run together).
fn graded_both(a: &'static str, b: &'static str) -> (std::sync::Arc<Run>, std::sync::Arc<Run>) {
    let other = std::thread::spawn(move || graded(b));
    let first = graded(a);
    (first, other.join().unwrap())
}

/// Attacks whose whole check is one of the assertions above: one test each, graded on Docker.
macro_rules! attacks {
    ($($(#[doc = $doc:literal])* $name:ident: $attack:literal => $check:expr;)*) => {
        $(
            $(#[doc = $doc])*
            #[test]
            fn $name() {
                if docker_ready() {
                    ($check)(&*graded($attack));
                }
            }
        )*
    };
}

// ---- controls -----------------------------------------------------------------------------

#[test]
fn controls_the_stub_fails_official_tests_and_the_reference_resolves() {
    if !docker_ready() {
        return;
    }
    let (stub, reference) = graded_both("prefix_cache_stub", "reference");
    assert_blamed_on_the_submission(&stub);
    let f2p_failing = stub
        .report()
        .grade
        .tests
        .iter()
        .filter(|t| t.expectation == Expectation::FailToPass && !t.passed())
        .count();
    assert!(f2p_failing >= 6, "{}", stub.context());
    assert!(
        categories(&stub, true).is_empty(),
        "the stub passes the interface probe, so only the official tests can reject it:\n{}",
        stub.context()
    );
    assert_contained(&reference);
    assert_eq!(
        verdict(&reference),
        Verdict::Resolved,
        "{}",
        reference.context()
    );
}

// ---- 1, 2: rewriting and forging the official results -------------------------------------

attacks! {
    forged_result_frames_on_the_events_socket_do_not_count:
        "forge_results_socket" => assert_forgery_did_not_count;
    forged_results_then_exit_before_the_canaries_run_do_not_count:
        "forge_results_and_exit" => assert_forgery_did_not_count;
    forged_results_that_answer_the_planted_canaries_too_do_not_count:
        "forge_canaries_too" => assert_forgery_did_not_count;
}

/// Known limit of the in-process official phase: rewriting only the official ids inside
/// the process fools it. The probes, which run where the submission cannot reach, reject it.
fn assert_the_probes_decide(run: &Run) {
    assert_contained(run);
    let v = verdict(run);
    assert!(
        matches!(v, Verdict::Unresolved | Verdict::Tampered),
        "a wrong implementation that rewrites its official results got `{}`:\n{}",
        v.as_str(),
        run.context()
    );
    assert_eq!(run.code, Some(exit_code_of(v)), "{}", run.context());
    let probes_failing = run
        .report()
        .grade
        .tests
        .iter()
        .filter(|t| t.expectation == Expectation::Probe && !t.passed())
        .count();
    assert!(probes_failing > 0, "{}", run.context());
}

attacks! {
    rewriting_outcomes_inside_the_plugins_emit_is_stopped_by_the_probes:
        "patch_plugin_emit" => assert_the_probes_decide;
    rewriting_pytests_test_reports_without_a_conftest_is_stopped_by_the_probes:
        "patch_testreport" => assert_the_probes_decide;
}

#[test]
fn a_hook_registered_through_the_plugin_manager_is_caught_by_the_canaries() {
    if !docker_ready() {
        return;
    }
    let run = graded("register_hook_flip_all");
    assert_forgery_did_not_count(&run);
    assert_eq!(verdict(&run), Verdict::Tampered, "{}", run.context());
    assert_eq!(run.code, Some(4));
}

#[test]
fn a_conftest_symlinked_to_a_sandbox_path_is_flagged_and_changes_nothing() {
    if !docker_ready() {
        return;
    }
    let run = graded("conftest_symlink");
    let flagged: Vec<&str> = run.report().flags.iter().map(|f| f.path.as_str()).collect();
    assert!(
        flagged.contains(&"conftest.py"),
        "conftest.py (a symlink to /infradev/repo/minicache/_testing.py) was not flagged \
         (flags: {flagged:?}); pytest loads it in the sandbox:\n{}",
        run.context()
    );
    assert_forgery_did_not_count(&run);
}

#[test]
fn malformed_huge_and_many_frames_end_the_grade_unresolved() {
    if docker_ready() {
        let run = graded("socket_abuse");
        // The flood can drown the run's real events, the planted canaries among them: then
        // the grade is tampered (seen on a loaded 2-core machine), otherwise unresolved.
        // Either way it fails the submission, never us.
        assert_failed_by_the_submission(&run, &[Verdict::Unresolved, Verdict::Tampered]);
        assert_forgery_did_not_count(&run);
    }
}

// ---- 3: shifting the blame to the infrastructure ------------------------------------------

#[test]
fn exiting_127_or_5_at_import_is_the_submissions_fault() {
    if !docker_ready() {
        return;
    }
    let (a, b) = graded_both("exit_127_at_import", "exit_5_at_import");
    assert_blamed_on_the_submission(&a);
    assert_blamed_on_the_submission(&b);
}

attacks! {
    killing_every_process_and_socket_is_the_submissions_fault:
        "kill_everything" => assert_blamed_on_the_submission;
    exhausting_fds_and_breaking_tmp_is_the_submissions_fault:
        "exhaust_fds_and_tmp" => assert_blamed_on_the_submission;
    exiting_70_before_pytest_starts_is_the_submissions_fault:
        "shadow_inspect" => assert_blamed_on_the_submission;
    a_subject_that_queues_connections_on_its_own_socket_then_dies_is_the_submissions_fault:
        "subject_reconnect" => assert_blamed_on_the_submission;
}

#[test]
fn a_symlink_to_dev_zero_in_the_diff_does_not_exhaust_the_grader() {
    if !docker_ready() {
        return;
    }
    // The address-space limit keeps a runaway from taking the test machine down with it.
    let run = graded("symlink_dev_zero");
    assert!(
        run.elapsed < Duration::from_secs(60),
        "{:?}:\n{}",
        run.elapsed,
        run.context()
    );
    assert!(
        matches!(run.code, Some(0 | 1 | 4)),
        "no verdict:\n{}",
        run.context()
    );
    assert_contained(&run);
}

// ---- 4: the subject against the probe phase -----------------------------------------------

fn assert_subject_attack(run: &Run, wanted: Option<Category>) {
    assert_blamed_on_the_submission(run);
    assert!(
        categories(run, false).is_empty(),
        "the attack is on the probe phase only; the official tests run the reference:\n{}",
        run.context()
    );
    let probes = categories(run, true);
    assert!(!probes.is_empty(), "{}", run.context());
    if let Some(wanted) = wanted {
        assert!(
            probes.contains(&wanted),
            "no `{wanted}` among the probes' categories {probes:?}:\n{}",
            run.context()
        );
    }
}

attacks! {
    garbage_frames_from_the_subject_fail_its_probes_and_nothing_else:
        "subject_garbage_frames" => |run| assert_subject_attack(run, None);
}

#[test]
fn a_subject_that_busy_loops_or_stops_itself_is_time() {
    if !docker_ready() {
        return;
    }
    let (hang, stop) = graded_both("subject_hang", "subject_sigstop");
    for run in [&hang, &stop] {
        assert_subject_attack(run, Some(Category::Time));
        // The first probe is the one that hung: it is time, not a crash or state.
        let first = &run
            .report()
            .grade
            .tests
            .iter()
            .find(|t| t.expectation == Expectation::Probe)
            .unwrap();
        assert_eq!(first.category, Some(Category::Time), "{}", run.context());
    }
}

#[test]
fn a_subject_that_hangs_while_the_judge_imports_it_is_time() {
    if !docker_ready() {
        return;
    }
    let run = graded("subject_hang_at_import");
    assert_subject_attack(&run, Some(Category::Time));
    let probes = categories(&run, true);
    assert!(
        !probes.contains(&Category::Build),
        "a subject that never answers (the judge calls it while collecting the probe files) \
         is a hang, not a build failure: {probes:?}\n{}",
        run.context()
    );
}

attacks! {
    a_subject_killed_for_memory_is_memory:
        "subject_oom" => |run| assert_subject_attack(run, Some(Category::Memory));
    a_fork_bomb_in_the_subject_is_contained:
        "subject_fork_bomb" => |run| assert_subject_attack(run, None);
}

// ---- 5: exfiltration ------------------------------------------------------------------------

/// The hidden prompt prefix of the memory probe, as the probe draws it from its seed.
fn memory_probe_prefix() -> Option<Vec<u64>> {
    let file = support::probes_dir().join("test_memory.py");
    let script = "import random, re, sys, zlib\n\
        src = open(sys.argv[1]).read()\n\
        secret = re.search(r'PROBE_SECRET = \"([^\"]+)\"', src).group(1)\n\
        rng = random.Random(zlib.crc32(secret.encode()))\n\
        print(' '.join(str(rng.randrange(32000)) for _ in range(32)))\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&file)
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect()
    })
}

#[test]
fn nothing_of_the_probes_or_their_inputs_is_recoverable_from_any_rendering() {
    if !docker_ready() {
        return;
    }
    let run = graded("exfiltrate");
    assert_contained(&run);
    assert_ne!(verdict(&run), Verdict::Error, "{}", run.context());
    // The measurement channel. The subject saw the memory probe's 32-token system prefix
    // (drawn from the seed behind PROBE-SECRET-memory-…) and held 10 + 3 * (prefix[0] % 32)
    // MiB during that probe. Decode the report the way the agent reading it would.
    let prefix = memory_probe_prefix().expect("python3 computes the memory probe's prefix");
    let measured = run
        .report()
        .grade
        .tests
        .iter()
        .find(|t| t.evidence.id.ends_with("test_history_is_bounded"))
        .and_then(|t| t.evidence.budget.as_ref())
        .map(|b| b.measured);
    if let Some(mib) = measured {
        let decoded = ((mib - 10.9) / 3.0).round() as i64;
        let truth = (prefix[0] % 32) as i64;
        assert_ne!(
            decoded,
            truth,
            "the report carries 5 bits of the memory probe's hidden input: its memory figure \
             ({mib} MiB) decodes to {decoded} = prefix[0] % 32 ({} % 32); a submission picks \
             which bits to send on each push and so recovers the whole prefix, and the seed \
             behind it:\n{}",
            prefix[0],
            run.context()
        );
    }
}

// ---- 6: floods --------------------------------------------------------------------------------

#[test]
fn an_output_flood_in_both_phases_is_bounded() {
    if !docker_ready() {
        return;
    }
    let run = graded("output_flood");
    assert_contained(&run);
    assert!(
        matches!(run.code, Some(0 | 1 | 4)),
        "no verdict:\n{}",
        run.context()
    );
    assert_ne!(verdict(&run), Verdict::Error, "{}", run.context());
    match run.max_docker_log {
        Some(bytes) => assert!(
            bytes <= 3 << 19,
            "a sandbox's Docker log grew to {bytes} bytes (capped at 1 MiB):\n{}",
            run.context()
        ),
        None if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true and the Docker daemon's log files are not readable here")
        }
        None => eprintln!("NOT CHECKED: the Docker daemon's log files are not readable here"),
    }
}

// ---- 7: control characters and workflow commands ---------------------------------------------

#[test]
fn escapes_and_workflow_commands_in_names_and_frames_reach_no_rendering() {
    if !docker_ready() {
        return;
    }
    let run = graded("hostile_names");
    let flagged = run
        .report()
        .flags
        .iter()
        // Shown sanitised: control characters as U+FFFD, a leading `:` behind `./`.
        .filter(|f| f.path.contains('\u{FFFD}') || f.path.contains("::"))
        .count();
    assert!(
        flagged >= 2,
        "the hostile paths are flagged (so they are rendered):\n{}",
        run.context()
    );
    assert_forgery_did_not_count(&run);
}
