use super::*;

#[test]
fn percentiles_are_nearest_rank() {
    let mut samples = Samples::default();
    for ms in 1..=100 {
        samples.record(Duration::from_millis(ms));
    }
    samples.errors = 3;
    let summary = samples.summary(Duration::from_secs(2));
    assert_eq!(summary.requests, 100);
    assert_eq!(summary.errors, 3);
    assert_eq!(summary.per_second, 50.0);
    assert_eq!(summary.p50_ms, 50.0);
    assert_eq!(summary.p99_ms, 99.0);
    assert_eq!(summary.max_ms, 100.0);
}
