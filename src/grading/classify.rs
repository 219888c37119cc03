//! Pure, table-tested classification of one test that did not pass.
//!
//! The rules run in a fixed order and the first that matches wins. The order encodes which
//! evidence is most trustworthy and which explanation is most specific:
//!
//! 1. **Infra** when the phase has an infra error. Our own faults (Docker, missing image,
//!    unreadable results) make every other signal in that phase meaningless, and they must
//!    never be blamed on the agent.
//! 2. **Kills** from outside the sandbox (OOM killer → Memory, wall clock → Time). The kernel
//!    and the clock are the strongest evidence there is: whatever the test reported before
//!    dying is incidental.
//! 3. **Budget breaches** measured by the plugin (Memory / Time / Traffic by kind): a measured
//!    number over a declared limit outranks whatever exception happened to surface.
//! 4. **Resource exceptions**: the plugin's own (`TestTimeout`, `*BudgetExceeded`, matched even
//!    without a budget field because the plugin may have raised before recording one),
//!    Python's `MemoryError`, torch's OOM errors. They precede the generic rules below because
//!    the budget exceptions subclass `AssertionError`.
//! 5. **Build**: syntax errors anywhere, and anything raised while importing a test file
//!    (collection), except `cannot import name`, which means the module imports fine but an
//!    interface it should export is missing (**Structural**).
//! 6. **Structural**: missing attributes, wrong call signatures, unimplemented stubs. These
//!    say the shape of the API is wrong, which is more specific than any behavioural category.
//! 7. **Numerical**: assertion messages of `torch.testing.assert_close` / numpy's
//!    `assert_allclose` saying values are not close.
//! 8. Otherwise the **declared** category (probes declare theirs; official tests carry the
//!    task's default), or **State** when nothing is declared: a plain wrong result.
//!
//! Matching is on the exception's qualified name and on message fragments produced by
//! CPython, pytest, torch and numpy; it never looks at source or tracebacks (there are none).

use super::{BudgetKind, Category, Kill, Outcome, PhaseEvidence, TestEvidence};

/// `TypeError` messages CPython produces for a call that does not fit the callee's signature.
const WRONG_SIGNATURE: &[&str] = &[
    "unexpected keyword argument",
    "positional argument",
    "required keyword-only argument",
    "takes no arguments",
    "object is not callable",
];

/// `AssertionError` messages of tolerance-based comparisons (torch and numpy).
const NOT_CLOSE: &[&str] = &[
    "are not close",
    "Not equal to tolerance",
    "Mismatched elements",
];

/// The category of a test that did not pass; `None` iff it passed.
pub fn classify(test: &TestEvidence, phase: &PhaseEvidence) -> Option<Category> {
    if test.outcome == Outcome::Passed {
        return None;
    }
    Some(category_of(test, phase))
}

fn category_of(test: &TestEvidence, phase: &PhaseEvidence) -> Category {
    if phase.infra_error.is_some() {
        return Category::Infra;
    }
    match test.kill {
        Some(Kill::OutOfMemory) => return Category::Memory,
        Some(Kill::TimedOut) => return Category::Time,
        Some(Kill::Crashed) | None => {}
    }
    if let Some(breach) = &test.budget {
        return budget_category(breach.kind);
    }
    let exception = test.exception.as_deref().map(unqualify_builtin);
    let message = test.message.as_deref().unwrap_or("");
    if let Some(category) = exception.and_then(|e| exception_category(e, message, test)) {
        return category;
    }
    if test.during_collection {
        return Category::Build;
    }
    test.declared.unwrap_or(Category::State)
}

fn budget_category(kind: BudgetKind) -> Category {
    match kind {
        BudgetKind::Memory => Category::Memory,
        BudgetKind::Time => Category::Time,
        BudgetKind::Traffic => Category::Traffic,
    }
}

/// Builtins are reported without a module; accept `builtins.X` too, so that a plugin change
/// in how names are qualified cannot silently move failures to the declared category.
fn unqualify_builtin(exception: &str) -> &str {
    exception.strip_prefix("builtins.").unwrap_or(exception)
}

/// Rules 4 to 7: what the exception alone says, if anything.
fn exception_category(exception: &str, message: &str, test: &TestEvidence) -> Option<Category> {
    let has = |fragments: &[&str]| fragments.iter().any(|f| message.contains(f));
    let category = match exception {
        "infradev_pytest.TestTimeout"
        | "infradev_pytest.TimeBudgetExceeded"
        | "infradev.TestTimeout"
        | "infradev.SubjectTimeout"
        | "infradev.TimeBudgetExceeded" => Category::Time,
        "infradev_pytest.MemoryBudgetExceeded"
        | "infradev.MemoryBudgetExceeded"
        | "infradev.SubjectOutOfMemory"
        | "MemoryError"
        | "torch.OutOfMemoryError"
        | "torch.cuda.OutOfMemoryError" => Category::Memory,
        "infradev_pytest.TrafficBudgetExceeded" | "infradev.TrafficBudgetExceeded" => {
            Category::Traffic
        }
        "infradev.MissingInterface" => Category::Structural,
        "SyntaxError" | "IndentationError" | "TabError" => Category::Build,
        "ModuleNotFoundError" if test.during_collection => Category::Build,
        "ImportError" if message.starts_with("cannot import name") => Category::Structural,
        _ if test.during_collection => Category::Build,
        "AttributeError" if message.contains("has no attribute") => Category::Structural,
        "TypeError" if has(WRONG_SIGNATURE) => Category::Structural,
        "NotImplementedError" => Category::Structural,
        "AssertionError" if has(NOT_CLOSE) => Category::Numerical,
        _ => return None,
    };
    Some(category)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grading::{BudgetBreach, Phase};

    fn phase() -> PhaseEvidence {
        PhaseEvidence::exited(Phase::Probes, 1)
    }

    fn failed(exception: Option<&str>, message: &str) -> TestEvidence {
        TestEvidence {
            id: "test_x.py::test_a".into(),
            phase: Phase::Probes,
            outcome: Outcome::Failed,
            exception: exception.map(str::to_owned),
            message: Some(message.to_owned()),
            budget: None,
            kill: None,
            declared: None,
            during_collection: false,
            attempts: Vec::new(),
        }
    }

    fn breach(kind: BudgetKind) -> Option<BudgetBreach> {
        Some(BudgetBreach {
            kind,
            measured: 2.0,
            limit: 1.0,
        })
    }

    #[test]
    fn passed_is_never_classified() {
        let mut test = failed(Some("AssertionError"), "");
        test.outcome = Outcome::Passed;
        let mut infra = phase();
        infra.infra_error = Some("docker died".into());
        assert_eq!(classify(&test, &infra), None);
    }

    /// One row per rule, in precedence order; later rows check that earlier rules win.
    #[test]
    #[rustfmt::skip]
    fn rules_table() {
        use Category::*;
        type Tweak = fn(&mut TestEvidence, &mut PhaseEvidence);
        let none: Tweak = |_, _| {};
        let rows: &[(&str, Option<&str>, &str, Tweak, Category)] = &[
            // 1. infra beats everything, even an OOM kill and a syntax error
            ("infra", Some("SyntaxError"), "", |t, p| {
                p.infra_error = Some("image missing".into());
                t.kill = Some(Kill::OutOfMemory);
            }, Infra),
            // 2. kills
            ("oom kill", Some("AssertionError"), "are not close", |t, _| t.kill = Some(Kill::OutOfMemory), Memory),
            ("wall clock", None, "", |t, _| t.kill = Some(Kill::TimedOut), Time),
            ("crash falls through", None, "", |t, _| t.kill = Some(Kill::Crashed), State),
            ("crash, declared", None, "", |t, _| {
                t.kill = Some(Kill::Crashed);
                t.declared = Some(Numerical);
            }, Numerical),
            ("kill beats budget", None, "", |t, _| {
                t.kill = Some(Kill::TimedOut);
                t.budget = breach(BudgetKind::Memory);
            }, Time),
            // 3. budgets
            ("memory budget", Some("AssertionError"), "x", |t, _| t.budget = breach(BudgetKind::Memory), Memory),
            ("time budget", None, "", |t, _| t.budget = breach(BudgetKind::Time), Time),
            ("traffic budget", Some("TypeError"), "takes no arguments", |t, _| t.budget = breach(BudgetKind::Traffic), Traffic),
            // 4. resource exceptions, with no budget field
            ("test timeout", Some("infradev_pytest.TestTimeout"), "60 s", none, Time),
            ("memory exc", Some("infradev_pytest.MemoryBudgetExceeded"), "", none, Memory),
            ("time exc", Some("infradev_pytest.TimeBudgetExceeded"), "", none, Time),
            ("traffic exc", Some("infradev_pytest.TrafficBudgetExceeded"), "", none, Traffic),
            // the judge's and the broker's names in the probe phase, with no message
            ("judge timeout", Some("infradev.TestTimeout"), "", none, Time),
            ("subject timeout", Some("infradev.SubjectTimeout"), "", none, Time),
            ("broker time", Some("infradev.TimeBudgetExceeded"), "", none, Time),
            ("broker memory", Some("infradev.MemoryBudgetExceeded"), "", none, Memory),
            ("subject oom", Some("infradev.SubjectOutOfMemory"), "", none, Memory),
            ("broker traffic", Some("infradev.TrafficBudgetExceeded"), "", none, Traffic),
            ("missing interface", Some("infradev.MissingInterface"), "", none, Structural),
            ("MemoryError", Some("MemoryError"), "", none, Memory),
            ("builtins.MemoryError", Some("builtins.MemoryError"), "", none, Memory),
            ("torch oom", Some("torch.OutOfMemoryError"), "CUDA out of memory", none, Memory),
            ("torch.cuda oom", Some("torch.cuda.OutOfMemoryError"), "", none, Memory),
            ("oom during collection", Some("torch.OutOfMemoryError"), "", |t, _| t.during_collection = true, Memory),
            // 5. build
            ("syntax", Some("SyntaxError"), "invalid syntax", none, Build),
            ("indentation", Some("IndentationError"), "unexpected indent", none, Build),
            ("tab", Some("TabError"), "inconsistent use of tabs", none, Build),
            ("missing module at import", Some("ModuleNotFoundError"), "No module named 'x'", |t, _| t.during_collection = true, Build),
            ("cannot import name", Some("ImportError"), "cannot import name 'Adam' from 'opt'", |t, _| t.during_collection = true, Structural),
            ("cannot import name, runtime", Some("ImportError"), "cannot import name 'Adam'", none, Structural),
            ("other import error", Some("ImportError"), "DLL load failed", |t, _| t.during_collection = true, Build),
            ("collection assertion", Some("AssertionError"), "are not close", |t, _| t.during_collection = true, Build),
            ("collection attribute", Some("AttributeError"), "has no attribute 'x'", |t, _| t.during_collection = true, Build),
            ("collection, no exception", None, "", |t, _| t.during_collection = true, Build),
            ("missing module at runtime", Some("ModuleNotFoundError"), "No module named 'x'", none, State),
            // 6. structural
            ("no attribute", Some("AttributeError"), "'Opt' object has no attribute 'step'", none, Structural),
            ("other attribute error", Some("AttributeError"), "can't set attribute", none, State),
            ("unexpected kwarg", Some("TypeError"), "f() got an unexpected keyword argument 'lr'", none, Structural),
            ("too many positional", Some("TypeError"), "f() takes 2 positional arguments but 3 were given", none, Structural),
            ("missing positional", Some("TypeError"), "f() missing 1 required positional argument: 'x'", none, Structural),
            ("missing kw-only", Some("TypeError"), "f() missing 1 required keyword-only argument: 'x'", none, Structural),
            ("no arguments", Some("TypeError"), "object() takes no arguments", none, Structural),
            ("not callable", Some("TypeError"), "'int' object is not callable", none, Structural),
            ("other type error", Some("TypeError"), "unsupported operand type(s)", |t, _| t.declared = Some(Numerical), Numerical),
            ("not implemented", Some("NotImplementedError"), "", none, Structural),
            ("structural beats declared", Some("NotImplementedError"), "", |t, _| t.declared = Some(Memory), Structural),
            // 7. numerical
            ("torch close", Some("AssertionError"), "Tensor-likes are not close!", none, Numerical),
            ("numpy close", Some("AssertionError"), "\nNot equal to tolerance rtol=1e-07", none, Numerical),
            ("mismatched", Some("AssertionError"), "Mismatched elements: 3 / 4 (75%)", none, Numerical),
            // 8. declared, else state
            ("plain assert", Some("AssertionError"), "assert 3 == 4", none, State),
            ("plain assert, declared", Some("AssertionError"), "assert 3 == 4", |t, _| t.declared = Some(Traffic), Traffic),
            ("unknown exception", Some("numpy.linalg.LinAlgError"), "Singular matrix", none, State),
            ("not run, nothing known", None, "", |t, _| t.outcome = Outcome::NotRun, State),
            ("skipped, declared", None, "", |t, _| {
                t.outcome = Outcome::Skipped;
                t.declared = Some(Memory);
            }, Memory),
        ];
        for (name, exception, message, tweak, want) in rows {
            let mut test = failed(*exception, message);
            let mut phase = phase();
            tweak(&mut test, &mut phase);
            assert_eq!(classify(&test, &phase), Some(*want), "row {name:?}");
        }
    }
}
