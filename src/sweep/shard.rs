//! Sharded sweeps: a deterministic subset of a grid's points for one machine of many.
//!
//! Shard `I/N` (0 ≤ I < N) holds the points `i` with `i mod N = I`, in grid order (round robin:
//! neighbouring points, which often cost alike, go to different machines). A shard with no
//! points (I ≥ the number of points) is allowed and writes a file with the header only.
//! `auto` reads the job array's variables: Slurm's `SLURM_ARRAY_TASK_ID` and
//! `SLURM_ARRAY_TASK_COUNT` (with `SLURM_ARRAY_TASK_MIN` and `SLURM_ARRAY_TASK_STEP` when set,
//! so `--array=1-8` and `--array=0-14:2` work), or Kubernetes' `JOB_COMPLETION_INDEX` with the
//! count in `DSA_SIM_SHARD_COUNT` (Kubernetes does not export `completions`).

use super::SweepError;
use std::fmt;

/// One shard of a grid: `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, 0-based.
    pub(crate) index: usize,
    /// How many shards.
    pub(crate) count: usize,
}

/// Most shards a grid may be split into.
pub(crate) const MAX_SHARDS: usize = 1_000_000;

impl Shard {
    /// The whole grid (shard 0 of 1).
    pub(crate) const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` (0 ≤ I < N ≤ [`MAX_SHARDS`]) or `auto` (see the module docs), reading the
    /// environment through `env`.
    pub(crate) fn parse_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, SweepError> {
        let t = text.trim();
        if t == "auto" {
            return Shard::from_env(env);
        }
        let bad = || {
            SweepError::Input(format!("--shard {t}: expected I/N with 0 <= I < N <= {MAX_SHARDS} (0-based), or auto"))
        };
        let (i, n) = t.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Parses `I/N` or `auto` with the process environment.
    pub(crate) fn parse(text: &str) -> Result<Shard, SweepError> {
        Shard::parse_with(text, &|k| std::env::var(k).ok())
    }

    /// The shard of this job-array task (see the module docs).
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, SweepError> {
        let num = |k: &str| -> Result<Option<usize>, SweepError> {
            match env(k) {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                    SweepError::Input(format!("--shard auto: {k} = {v:?}: expected a non-negative integer"))
                }),
            }
        };
        let (index, count, source) = if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let count = num("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
                SweepError::Input("--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not".into())
            })?;
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let step = num("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
            if id < min || (id - min) % step != 0 {
                return Err(SweepError::Input(format!(
                    "--shard auto: SLURM_ARRAY_TASK_ID = {id} is not SLURM_ARRAY_TASK_MIN ({min}) + a multiple of SLURM_ARRAY_TASK_STEP ({step})"
                )));
            }
            ((id - min) / step, count, "SLURM_ARRAY_TASK_ID")
        } else if let Some(i) = num("JOB_COMPLETION_INDEX")? {
            let count = num("DSA_SIM_SHARD_COUNT")?.ok_or_else(|| {
                SweepError::Input(
                    "--shard auto: JOB_COMPLETION_INDEX is set but DSA_SIM_SHARD_COUNT is not (set it to the Job's completions)"
                        .into(),
                )
            })?;
            (i, count, "JOB_COMPLETION_INDEX")
        } else {
            return Err(SweepError::Input(
                "--shard auto: neither SLURM_ARRAY_TASK_ID (Slurm job array) nor JOB_COMPLETION_INDEX (Kubernetes Indexed Job) is set; give --shard I/N"
                    .into(),
            ));
        };
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(SweepError::Input(format!(
                "--shard auto: shard {index} of {count} (from {source}): expected 0 <= index < count <= {MAX_SHARDS}"
            )));
        }
        Ok(Shard { index, count })
    }

    /// Whether this is the whole grid.
    pub(crate) fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// How many of `total` points the shard holds.
    pub(crate) fn len(&self, total: usize) -> usize {
        if self.index >= total {
            0
        } else {
            (total - self.index).div_ceil(self.count)
        }
    }

    /// The grid index of the shard's `pos`-th point.
    pub(crate) fn point(&self, pos: usize) -> usize {
        self.index + pos * self.count
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone())
    }

    #[test]
    fn round_robin_covers_every_point_once() {
        for total in [1usize, 2, 5, 17] {
            for count in 1..=total + 3 {
                let mut seen = vec![0; total];
                for index in 0..count {
                    let s = Shard { index, count };
                    for pos in 0..s.len(total) {
                        assert_eq!(s.point(pos) % count, index);
                        seen[s.point(pos)] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "total {total} count {count}");
            }
        }
    }

    #[test]
    fn parse_and_auto() {
        let none = env(&[]);
        assert_eq!(Shard::parse_with("2/5", &none).unwrap(), Shard { index: 2, count: 5 });
        for bad in ["5/5", "0/0", "-1/3", "1", "a/b", "1/2/3", ""] {
            assert!(Shard::parse_with(bad, &none).is_err(), "{bad}");
        }
        let e = Shard::parse_with("auto", &none).unwrap_err().to_string();
        assert!(e.contains("SLURM_ARRAY_TASK_ID") && e.contains("JOB_COMPLETION_INDEX"), "{e}");
        let slurm = env(&[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "4")]);
        assert_eq!(Shard::parse_with("auto", &slurm).unwrap(), Shard { index: 3, count: 4 });
        let one_based =
            env(&[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_COUNT", "4"), ("SLURM_ARRAY_TASK_MIN", "1")]);
        assert_eq!(Shard::parse_with("auto", &one_based).unwrap(), Shard { index: 3, count: 4 });
        let stepped = env(&[
            ("SLURM_ARRAY_TASK_ID", "14"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ]);
        assert_eq!(Shard::parse_with("auto", &stepped).unwrap(), Shard { index: 7, count: 8 });
        let k8s = env(&[("JOB_COMPLETION_INDEX", "0"), ("DSA_SIM_SHARD_COUNT", "10")]);
        assert_eq!(Shard::parse_with("auto", &k8s).unwrap(), Shard { index: 0, count: 10 });
        assert!(Shard::parse_with("auto", &env(&[("JOB_COMPLETION_INDEX", "0")]))
            .unwrap_err()
            .to_string()
            .contains("DSA_SIM_SHARD_COUNT"));
        assert!(
            Shard::parse_with("auto", &env(&[("SLURM_ARRAY_TASK_ID", "5"), ("SLURM_ARRAY_TASK_COUNT", "5")])).is_err()
        );
    }
}
