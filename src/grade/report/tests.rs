use super::fixtures::{
    PROBE_SOURCE, build_failure, flaky, infra_error, not_applied, probes_reject, resolved,
};
use super::{Report, render_json, render_junit, render_summary};

#[test]
fn summary_resolved() {
    insta::assert_snapshot!(render_summary(&resolved()), @r#"
    RESOLVED  all 2 official tests and 2 probes pass

    task        shard-adam-state  example/opt#123  base 1a2b3c4d5e6f  reference 5d6e7f8a9b0c
    submission  /work/submissions/opt @ abcdef012345  (2 file(s) changed)
    executor    docker

    official tests (2/2 passed)
      PASS     F2P  tests/test_opt.py::test_shard_state
      PASS     P2P  tests/test_opt.py::test_step

    probes (2/2 passed)
      PASS     test_state.py::test_resume_restores_step_count
      PASS     test_mem.py::test_history_is_bounded

    phases
      tests       4.2 s  exit 0
      probes      4.2 s  exit 0
    "#);
}

#[test]
fn summary_probes_reject() {
    insta::assert_snapshot!(render_summary(&probes_reject()), @r#"
    UNRESOLVED  official tests pass but 2 of 2 probes fail (state 1, memory 1)
      ! passes every official test but is rejected by 2 hidden probe(s)

    task        shard-adam-state  example/opt#123  base 1a2b3c4d5e6f  reference 5d6e7f8a9b0c
    submission  /work/submissions/opt @ abcdef012345  (2 file(s) changed)
    executor    local
      limit     no network isolation
      limit     no memory limit (OOM kills not detected)

    official tests (2/2 passed)
      PASS     F2P  tests/test_opt.py::test_shard_state
      PASS     P2P  tests/test_opt.py::test_step

    probes (0/2 passed)
      FAIL     test_state.py::test_resume_restores_step_count  state
               requires: A resumed optimizer continues from the saved step count.
               AssertionError: [redacted: matches hidden probe source]
      FAIL     test_mem.py::test_history_is_bounded            memory
               requires: Optimizer history stays under 32 MB.
               memory budget: measured 40.5 over limit 32; infradev_pytest.MemoryBudgetExceeded: peak 40.5 MB over budget 32.0 MB

    failures by category  official  probes  total
      state                      0       1      1
      memory                     0       1      1

    phases
      tests       4.2 s  exit 0
      probes      4.2 s  exit 1
    "#);
}

#[test]
fn summary_build_failure() {
    insta::assert_snapshot!(render_summary(&build_failure()), @r#"
    UNRESOLVED  1 of 1 FAIL_TO_PASS fail (build 1); 1 of 1 PASS_TO_PASS fail (build 1); 2 of 2 probes fail (build 2)

    task        shard-adam-state  example/opt#123  base 1a2b3c4d5e6f  reference 5d6e7f8a9b0c
    submission  /work/submissions/opt @ abcdef012345  (2 file(s) changed)
    executor    docker
    flagged     conftest.py: pytest configuration; restored to base

    official tests (0/2 passed)
      FAIL     F2P  tests/test_opt.py::test_shard_state             build
                    SyntaxError: invalid syntax (opt.py, line 12)
      FAIL     P2P  tests/test_opt.py::test_step                    build
                    SyntaxError: invalid syntax (opt.py, line 12)

    probes (0/2 passed)
      FAIL     test_state.py::test_resume_restores_step_count  build
               requires: A resumed optimizer continues from the saved step count.
               SyntaxError: invalid syntax (opt.py, line 12)
      FAIL     test_mem.py::test_history_is_bounded            build
               requires: Optimizer history stays under 32 MB.
               SyntaxError: invalid syntax (opt.py, line 12)

    failures by category  official  probes  total
      build                      2       2      4

    phases
      tests       4.2 s  exit 2
      probes      4.2 s  exit 2
    "#);
}

#[test]
fn summary_infra_error() {
    insta::assert_snapshot!(render_summary(&infra_error()), @r#"
    ERROR  infrastructure error in the probes phase: docker: image infradev/shard-adam-state:probes not found

    task        shard-adam-state  example/opt#123  base 1a2b3c4d5e6f  reference 5d6e7f8a9b0c
    submission  /work/submissions/opt @ abcdef012345  (2 file(s) changed)
    executor    docker

    official tests (2/2 passed)
      PASS     F2P  tests/test_opt.py::test_shard_state
      PASS     P2P  tests/test_opt.py::test_step

    probes (0/2 passed)
      NOT RUN  test_state.py::test_resume_restores_step_count  infra
               requires: A resumed optimizer continues from the saved step count.
               never ran
      NOT RUN  test_mem.py::test_history_is_bounded            infra
               requires: Optimizer history stays under 32 MB.
               never ran

    failures by category  official  probes  total
      infra                      0       2      2

    phases
      tests       4.2 s  exit 0
      probes      4.2 s  infra error: docker: image infradev/shard-adam-state:probes not found
    "#);
}

#[test]
fn summary_not_applied() {
    insta::assert_snapshot!(render_summary(&not_applied()), @r#"
    UNRESOLVED  the change does not apply: head abcdef012345 does not contain base commit 1a2b3c4d5e6f

    task        shard-adam-state  example/opt#123  base 1a2b3c4d5e6f  reference 5d6e7f8a9b0c
    submission  /work/submissions/opt @ abcdef012345  (2 file(s) changed)
    executor    docker
    not applied head abcdef012345 does not contain base commit 1a2b3c4d5e6f

    official tests (0/2 passed)
      NOT RUN  F2P  tests/test_opt.py::test_shard_state             build
                    never ran
      NOT RUN  P2P  tests/test_opt.py::test_step                    build
                    never ran

    probes (0/2 passed)
      NOT RUN  test_state.py::test_resume_restores_step_count  build
               requires: A resumed optimizer continues from the saved step count.
               never ran
      NOT RUN  test_mem.py::test_history_is_bounded            build
               requires: Optimizer history stays under 32 MB.
               never ran

    failures by category  official  probes  total
      build                      2       2      4
    "#);
}

#[test]
fn junit_probes_reject() {
    insta::assert_snapshot!(render_junit(&probes_reject()), @r#"
    <?xml version="1.0" encoding="UTF-8"?>
    <testsuites name="infradev shard-adam-state" tests="4" failures="2" errors="0">
        <testsuite name="tests" tests="2" disabled="0" errors="0" failures="0" time="4.250">
            <testcase name="test_shard_state" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="fail_to_pass"/>
                </properties>
            </testcase>
            <testcase name="test_step" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="pass_to_pass"/>
                </properties>
            </testcase>
        </testsuite>
        <testsuite name="probes" tests="2" disabled="0" errors="0" failures="2" time="4.250">
            <testcase name="test_resume_restores_step_count" classname="test_state.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
                <failure message="[redacted: matches hidden probe source]" type="state">AssertionError: [redacted: matches hidden probe source]</failure>
            </testcase>
            <testcase name="test_history_is_bounded" classname="test_mem.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
                <failure message="peak 40.5 MB over budget 32.0 MB" type="memory">memory budget: measured 40.5 over limit 32; infradev_pytest.MemoryBudgetExceeded: peak 40.5 MB over budget 32.0 MB</failure>
            </testcase>
        </testsuite>
    </testsuites>
    "#);
}

#[test]
fn junit_infra_error() {
    insta::assert_snapshot!(render_junit(&infra_error()), @r#"
    <?xml version="1.0" encoding="UTF-8"?>
    <testsuites name="infradev shard-adam-state" tests="4" failures="0" errors="2">
        <testsuite name="tests" tests="2" disabled="0" errors="0" failures="0" time="4.250">
            <testcase name="test_shard_state" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="fail_to_pass"/>
                </properties>
            </testcase>
            <testcase name="test_step" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="pass_to_pass"/>
                </properties>
            </testcase>
        </testsuite>
        <testsuite name="probes" tests="2" disabled="0" errors="2" failures="0" time="4.250">
            <properties>
                <property name="infra_error" value="docker: image infradev/shard-adam-state:probes not found"/>
            </properties>
            <testcase name="test_resume_restores_step_count" classname="test_state.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
                <error message="never ran" type="infra">never ran</error>
            </testcase>
            <testcase name="test_history_is_bounded" classname="test_mem.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
                <error message="never ran" type="infra">never ran</error>
            </testcase>
        </testsuite>
    </testsuites>
    "#);
}

#[test]
fn junit_resolved() {
    insta::assert_snapshot!(render_junit(&resolved()), @r#"
    <?xml version="1.0" encoding="UTF-8"?>
    <testsuites name="infradev shard-adam-state" tests="4" failures="0" errors="0">
        <testsuite name="tests" tests="2" disabled="0" errors="0" failures="0" time="4.250">
            <testcase name="test_shard_state" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="fail_to_pass"/>
                </properties>
            </testcase>
            <testcase name="test_step" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="pass_to_pass"/>
                </properties>
            </testcase>
        </testsuite>
        <testsuite name="probes" tests="2" disabled="0" errors="0" failures="0" time="4.250">
            <testcase name="test_resume_restores_step_count" classname="test_state.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
            </testcase>
            <testcase name="test_history_is_bounded" classname="test_mem.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
            </testcase>
        </testsuite>
    </testsuites>
    "#);
}

#[test]
fn junit_build_failure() {
    insta::assert_snapshot!(render_junit(&build_failure()), @r#"
    <?xml version="1.0" encoding="UTF-8"?>
    <testsuites name="infradev shard-adam-state" tests="4" failures="4" errors="0">
        <testsuite name="tests" tests="2" disabled="0" errors="0" failures="2" time="4.250">
            <testcase name="test_shard_state" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="fail_to_pass"/>
                </properties>
                <failure message="invalid syntax (opt.py, line 12)" type="build">SyntaxError: invalid syntax (opt.py, line 12)</failure>
            </testcase>
            <testcase name="test_step" classname="tests/test_opt.py">
                <properties>
                    <property name="expectation" value="pass_to_pass"/>
                </properties>
                <failure message="invalid syntax (opt.py, line 12)" type="build">SyntaxError: invalid syntax (opt.py, line 12)</failure>
            </testcase>
        </testsuite>
        <testsuite name="probes" tests="2" disabled="0" errors="0" failures="2" time="4.250">
            <testcase name="test_resume_restores_step_count" classname="test_state.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
                <failure message="invalid syntax (opt.py, line 12)" type="build">SyntaxError: invalid syntax (opt.py, line 12)</failure>
            </testcase>
            <testcase name="test_history_is_bounded" classname="test_mem.py">
                <properties>
                    <property name="expectation" value="probe"/>
                </properties>
                <failure message="invalid syntax (opt.py, line 12)" type="build">SyntaxError: invalid syntax (opt.py, line 12)</failure>
            </testcase>
        </testsuite>
    </testsuites>
    "#);
}

#[test]
fn json_build_failure() {
    insta::assert_snapshot!(render_json(&build_failure()), @r#"
    {
      "schema_version": 1,
      "task": {
        "id": "shard-adam-state",
        "repository": "example/opt",
        "pr": 123,
        "base_commit": "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d",
        "reference_commit": "5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e"
      },
      "submission": {
        "repo": "/work/submissions/opt",
        "head": "abcdef0123456789abcdef0123456789abcdef01",
        "changed_files": [
          "opt.py",
          "tests/test_opt.py"
        ]
      },
      "executor": "docker",
      "executor_limits": [],
      "flags": [
        {
          "path": "conftest.py",
          "reason": "pytest configuration; restored to base"
        }
      ],
      "apply_error": null,
      "phases": [
        {
          "evidence": {
            "phase": "tests",
            "exit_code": 2,
            "kill": null,
            "infra_error": null,
            "inconsistent": null,
            "tampered": null
          },
          "duration_s": 4.25,
          "attempt": 1
        },
        {
          "evidence": {
            "phase": "probes",
            "exit_code": 2,
            "kill": null,
            "infra_error": null,
            "inconsistent": null,
            "tampered": null
          },
          "duration_s": 4.25,
          "attempt": 1
        }
      ],
      "grade": {
        "verdict": "unresolved",
        "reason": "1 of 1 FAIL_TO_PASS fail (build 1); 1 of 1 PASS_TO_PASS fail (build 1); 2 of 2 probes fail (build 2)",
        "official_passed_but_probes_failed": false,
        "tests": [
          {
            "expectation": "fail_to_pass",
            "evidence": {
              "id": "tests/test_opt.py::test_shard_state",
              "phase": "tests",
              "outcome": "failed",
              "exception": "SyntaxError",
              "message": "invalid syntax (opt.py, line 12)",
              "budget": null,
              "kill": null,
              "declared": "state",
              "during_collection": true
            },
            "category": "build"
          },
          {
            "expectation": "pass_to_pass",
            "evidence": {
              "id": "tests/test_opt.py::test_step",
              "phase": "tests",
              "outcome": "failed",
              "exception": "SyntaxError",
              "message": "invalid syntax (opt.py, line 12)",
              "budget": null,
              "kill": null,
              "declared": "state",
              "during_collection": true
            },
            "category": "build"
          },
          {
            "expectation": "probe",
            "evidence": {
              "id": "test_state.py::test_resume_restores_step_count",
              "phase": "probes",
              "outcome": "failed",
              "exception": "SyntaxError",
              "message": "invalid syntax (opt.py, line 12)",
              "budget": null,
              "kill": null,
              "declared": "state",
              "during_collection": true
            },
            "category": "build"
          },
          {
            "expectation": "probe",
            "evidence": {
              "id": "test_mem.py::test_history_is_bounded",
              "phase": "probes",
              "outcome": "failed",
              "exception": "SyntaxError",
              "message": "invalid syntax (opt.py, line 12)",
              "budget": null,
              "kill": null,
              "declared": "memory",
              "during_collection": true
            },
            "category": "build"
          }
        ],
        "counts": {
          "official": {
            "build": 2
          },
          "probes": {
            "build": 2
          },
          "total": {
            "build": 4
          }
        }
      },
      "probe_requirements": {
        "test_mem.py::test_history_is_bounded": "Optimizer history stays under 32 MB.",
        "test_state.py::test_resume_restores_step_count": "A resumed optimizer continues from the saved step count."
      },
      "run_id": "3f2a9c1b7d4e",
      "provenance": {
        "probes_digest": "sha256:5d8e0c2a7b41"
      }
    }
    "#);
}

#[test]
fn json_round_trips() {
    for report in [
        resolved(),
        probes_reject(),
        build_failure(),
        infra_error(),
        not_applied(),
    ] {
        let back: Report = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(back, report);
    }
}

/// No rendering of any report shows a canary, a probe literal or a probe source line.
#[test]
fn renderings_never_show_probe_source() {
    let forbidden = [
        "PROBE-SECRET",
        "SECRET_LR",
        "state_dict()",
        "lost its step count",
        "ShardedAdam(lr",
    ];
    for report in [
        resolved(),
        probes_reject(),
        build_failure(),
        infra_error(),
        not_applied(),
    ] {
        for text in [
            render_summary(&report),
            render_junit(&report),
            render_json(&report),
        ] {
            for needle in forbidden {
                assert!(PROBE_SOURCE.contains(needle));
                assert!(!text.contains(needle), "{needle:?} leaked into:\n{text}");
            }
        }
    }
}

/// The example in docs/grade-json.md is a valid report.
#[test]
fn documented_example_parses() {
    let doc = include_str!("../../../docs/grade-json.md");
    let example = doc
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let report: Report = serde_json::from_str(example).unwrap();
    assert!(report.grade.official_passed_but_probes_failed);
    assert!(!example.contains("PROBE-SECRET"));
}

/// A probe that failed and then passed on the host's rerun: `FLAKY`, never a pass, in every
/// rendering; the verdict is unresolved and says so.
#[test]
fn flaky_results_are_their_own_outcome_and_never_a_pass() {
    let r = flaky();
    assert_eq!(r.grade.verdict, crate::grading::Verdict::Unresolved);
    assert_eq!(r.grade.counts.flaky, 1);
    insta::assert_snapshot!("summary_flaky", render_summary(&r));

    let json: serde_json::Value = serde_json::from_str(&render_json(&r)).unwrap();
    let memory = &json["grade"]["tests"][3];
    assert_eq!(memory["evidence"]["outcome"], "flaky");
    assert_eq!(
        memory["evidence"]["attempts"],
        serde_json::json!(["failed", "passed"])
    );
    assert_eq!(memory["category"], "memory");
    assert_eq!(json["grade"]["counts"]["flaky"], 1);
    assert_eq!(json["phases"][2]["attempt"], 2);
    // Tests that ran once carry no attempts at all.
    assert!(
        json["grade"]["tests"][0]["evidence"]
            .get("attempts")
            .is_none()
    );

    let junit = render_junit(&r);
    let case = junit
        .split("<testcase")
        .find(|c| c.contains("test_history_is_bounded"))
        .unwrap();
    assert!(case.contains("<failure"), "{case}");
    assert!(case.contains(r#"name="outcome" value="flaky""#), "{case}");
    assert!(
        case.contains(r#"name="attempts" value="failed,passed""#),
        "{case}"
    );
    assert!(
        case.contains("flaky: failed, then passed on attempt 2 (not a pass)"),
        "{case}"
    );
}
