//! Observations counted in fixed buckets, as a Prometheus histogram counts
//! them: for figures whose spread matters more than their mean (how much
//! of its TTL a lease had left when its heartbeat came, how long acquires
//! waited). INFO prints the buckets; the metrics endpoint hands them to
//! prometheus-client, which encodes them.

use std::fmt::Write as _;

#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Upper bounds (inclusive), ascending; one more bucket takes the rest.
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative): `bounds.len() + 1`.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// Counts `value` in the first bucket whose bound is at least it. A NaN
    /// is not counted.
    pub fn observe(&mut self, value: f64) {
        if value.is_nan() {
            return;
        }
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.counts[bucket] += 1;
        self.sum += value;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The upper bound of the bucket that holds the `percentile`th
    /// observation (0 to 100), as HDR histograms report a value's bucket;
    /// the last bound for one past them all, 0 with no observations.
    pub fn percentile(&self, percentile: f64) -> f64 {
        let count = self.count();
        if count == 0 {
            return 0.0;
        }
        let rank = ((percentile / 100.0 * count as f64).ceil() as u64).clamp(1, count);
        let mut below = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            below += n;
            if below >= rank {
                let last = self.bounds.len().saturating_sub(1);
                return self.bounds.get(bucket.min(last)).copied().unwrap_or(0.0);
            }
        }
        0.0
    }

    /// Each bucket's upper bound (the last one infinite) and its own count,
    /// not cumulative: as prometheus-client's encoder takes them.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        bounds.zip(self.counts.iter().copied()).collect()
    }

    /// `le_0.1=3,le_0.2=5,...,le_inf=9,sum=4.2,count=9`: cumulative counts,
    /// as a Prometheus histogram reads, for one line of INFO.
    pub fn info_value(&self) -> String {
        let mut out = String::new();
        let mut below = 0;
        for (bound, count) in self.buckets() {
            below += count;
            if bound.is_infinite() {
                let _ = write!(out, "le_inf={below},");
            } else {
                let _ = write!(out, "le_{bound}={below},");
            }
        }
        // Six decimals: sums of fractions would otherwise show their
        // binary rounding (1.9000000000000001).
        let sum = format!("{:.6}", self.sum);
        let sum = sum.trim_end_matches('0').trim_end_matches('.');
        let _ = write!(out, "sum={sum},count={}", self.count());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_fall_in_the_first_bucket_whose_bound_is_at_least_them() {
        let mut histogram = Histogram::new(&[0.5, 1.0]);
        for value in [0.0, 0.5, 0.75, 1.0, 2.0, f64::NAN] {
            histogram.observe(value);
        }
        assert_eq!(
            histogram.buckets(),
            [(0.5, 2), (1.0, 2), (f64::INFINITY, 1)]
        );
        assert_eq!(histogram.count(), 5);
        assert_eq!(histogram.sum(), 4.25);
        assert_eq!(histogram.percentile(0.0), 0.5);
        assert_eq!(histogram.percentile(50.0), 1.0);
        assert_eq!(histogram.percentile(80.0), 1.0);
        // Past the last bound: the last bound.
        assert_eq!(histogram.percentile(100.0), 1.0);
        assert_eq!(Histogram::new(&[1.0]).percentile(50.0), 0.0);
        assert_eq!(
            histogram.info_value(),
            "le_0.5=2,le_1=4,le_inf=5,sum=4.25,count=5"
        );
    }
}
