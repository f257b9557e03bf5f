use super::*;

#[test]
fn a_window_ends_at_the_first_success_after_the_last_failure() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let killed = at(100);
    let attempts = vec![
        (at(90), at(95), true),
        // In flight at the kill, answered after it: not counted.
        (at(95), at(110), true),
        (at(110), at(120), false),
        (at(130), at(900), true),
        (at(900), at(950), false),
        (at(960), at(1200), true),
        (at(1200), at(1210), true),
    ];
    assert_eq!(window(&attempts, killed), Some(Duration::from_millis(1100)));
}

#[test]
fn a_stall_without_failure_counts_from_the_kill() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let attempts = vec![(at(90), at(2000), true), (at(2000), at(2005), true)];
    assert_eq!(
        window(&attempts, at(100)),
        Some(Duration::from_millis(1905))
    );
}

#[test]
fn no_success_after_the_last_failure_is_no_window() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let attempts = vec![(at(110), at(120), true), (at(130), at(140), false)];
    assert_eq!(window(&attempts, at(100)), None);
}
