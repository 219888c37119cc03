//! Budgets against what the broker measured: which budget a test has, whether it was
//! exceeded, and the coarse figure a breach is reported with.

use std::time::Duration;

use super::meter::Usage;
use crate::grading::{BudgetBreach, BudgetKind};
use crate::task::Budget;

/// The first budget the usage exceeds, if any.
/// `rank_max`: the most bytes one rank sent (when the test ran a rank group whose traffic is
/// measured).
pub(super) fn breach(
    budget: &Budget,
    subject_time: Duration,
    usage: &Usage,
    rank_max: Option<u64>,
) -> Option<BudgetBreach> {
    let over = |kind, measured: f64, limit: f64| {
        (measured > limit).then(|| BudgetBreach {
            kind,
            measured: coarse(measured, limit),
            limit,
        })
    };
    budget
        .peak_memory_mb
        .zip(usage.peak_memory_mb)
        .and_then(|(limit, m)| over(BudgetKind::Memory, m, limit))
        .or_else(|| {
            budget
                .wall_time_s
                .and_then(|limit| over(BudgetKind::Time, subject_time.as_secs_f64(), limit))
        })
        .or_else(|| {
            budget
                .collective_bytes
                .zip(usage.sent_bytes)
                .and_then(|(limit, b)| over(BudgetKind::Traffic, b as f64, limit as f64))
        })
        .or_else(|| {
            budget
                .rank_bytes
                .zip(rank_max)
                .and_then(|(limit, b)| over(BudgetKind::Traffic, b as f64, limit as f64))
        })
}

/// A measurement over its limit as it is reported: the largest power-of-two multiple of the
/// limit it reaches (a lower bound: "at least 8x the budget"). The subject shapes what it
/// uses, so an exact figure would be a channel out of the sandbox (a few bits of hidden
/// inputs per probe and grade); a bucket carries at most about two.
pub(super) fn coarse(measured: f64, limit: f64) -> f64 {
    if !(measured.is_finite() && limit > 0.0 && measured > limit) {
        return limit;
    }
    let mut bucket = limit;
    while bucket * 2.0 <= measured && bucket < limit * 1024.0 {
        bucket *= 2.0;
    }
    bucket
}

pub(super) fn budget_for<'a>(budgets: &'a [(String, Budget)], nodeid: &str) -> Option<&'a Budget> {
    let base = nodeid.split_once('[').map_or(nodeid, |(b, _)| b);
    budgets
        .iter()
        .find(|(id, _)| id == nodeid)
        .or_else(|| budgets.iter().find(|(id, _)| id == base))
        .map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::grading::BudgetKind;

    #[test]
    fn budgets_apply_to_every_case_of_a_test() {
        let b = Budget {
            wall_time_s: Some(1.0),
            ..Default::default()
        };
        let budgets = vec![("t.py::test_x".to_owned(), b.clone())];
        assert_eq!(budget_for(&budgets, "t.py::test_x[1-2]"), Some(&b));
        assert_eq!(budget_for(&budgets, "t.py::test_x"), Some(&b));
        assert_eq!(budget_for(&budgets, "t.py::test_y"), None);
    }

    #[test]
    fn breaches_are_measured_against_each_budget() {
        let budget = Budget {
            peak_memory_mb: Some(4.0),
            wall_time_s: Some(3.0),
            collective_bytes: Some(1000),
            ..Default::default()
        };
        let fine = Usage {
            peak_memory_mb: Some(1.0),
            sent_bytes: Some(10),
        };
        assert_eq!(breach(&budget, Duration::from_secs(1), &fine, None), None);
        let leak = Usage {
            peak_memory_mb: Some(12.345_678),
            ..fine
        };
        assert_eq!(
            breach(&budget, Duration::from_secs(1), &leak, None),
            Some(BudgetBreach {
                kind: BudgetKind::Memory,
                measured: 8.0,
                limit: 4.0
            })
        );
        let slow = breach(&budget, Duration::from_millis(4321), &fine, None).unwrap();
        assert_eq!((slow.kind, slow.measured), (BudgetKind::Time, 3.0));
        let chatty = Usage {
            sent_bytes: Some(5000),
            ..fine
        };
        assert_eq!(
            breach(&budget, Duration::ZERO, &chatty, None).unwrap().kind,
            BudgetKind::Traffic
        );
        let per_rank = Budget {
            rank_bytes: Some(1024),
            ..Default::default()
        };
        assert_eq!(breach(&per_rank, Duration::ZERO, &fine, Some(1024)), None);
        assert_eq!(
            breach(&per_rank, Duration::ZERO, &fine, Some(2100)),
            Some(BudgetBreach {
                kind: BudgetKind::Traffic,
                measured: 2048.0,
                limit: 1024.0
            })
        );
        // No rank group (or ranks whose traffic is not measured): nothing to hold against.
        assert_eq!(breach(&per_rank, Duration::ZERO, &fine, None), None);
    }

    #[test]
    fn figures_are_power_of_two_multiples_of_the_limit() {
        assert_eq!(coarse(37.6, 4.0), 32.0);
        assert_eq!(coarse(4.1, 4.0), 4.0);
        assert_eq!(coarse(8.0, 4.0), 8.0);
        assert_eq!(coarse(1e12, 1.0), 1024.0);
        assert_eq!(coarse(f64::NAN, 2.0), 2.0);
    }
}
