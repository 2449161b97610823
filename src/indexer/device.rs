//! Where the vector model's trials run (`--device`, Python `device=`): the CPU, or one or more
//! CUDA GPUs (`super::cuda`, built with `--features cuda`).
//!
//! Several GPUs split the trials by the shard rule the sweeps use: work item c (trials
//! c·chunk .. (c+1)·chunk, each drawn from (seed, i) alone) runs on device c mod D. A trial's
//! result does not depend on where it runs, so `cuda:0,1` — or the same ordinal twice, two
//! streams sharing one card, which is how the rule is tested on one GPU — gives the counts of
//! `cuda:0`. Refusals ([`Device::check`]) are bad input, one line, before any work.

use std::fmt;

/// Most devices one `--device` names (more than a host holds).
pub(crate) const MAX_DEVICES: usize = 16;

/// The vector model's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// The CPU (the default).
    #[default]
    Cpu,
    /// CUDA GPUs, by ordinal; work item c runs on the (c mod len)-th.
    Cuda(Ordinals),
}

/// CUDA ordinals in the order given (a fixed array, so that [`Device`] is `Copy` like the other
/// engine settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ordinals {
    list: [u16; MAX_DEVICES],
    len: u8,
}

impl Ordinals {
    /// The ordinals, in order.
    pub(crate) fn as_slice(&self) -> &[u16] {
        &self.list[..self.len as usize]
    }
}

/// A `--device` value that is not `cpu`, `cuda`, `cuda:N` or `cuda:N,M,…`, or a CUDA device
/// this build or machine cannot run (always bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DeviceError(pub String);

impl crate::error::Classify for DeviceError {
    fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Input
    }
}

impl std::str::FromStr for Device {
    type Err = DeviceError;

    /// `cpu`, `cuda` (= `cuda:0`), `cuda:N` or `cuda:N,M,…` (at most `MAX_DEVICES`).
    fn from_str(text: &str) -> Result<Device, DeviceError> {
        let bad = || {
            DeviceError(format!(
                "device = {text:?}: allowed cpu, cuda, cuda:N or cuda:N,M,… (at most {MAX_DEVICES} ordinals)"
            ))
        };
        let t = text.trim();
        if t == "cpu" {
            return Ok(Device::Cpu);
        }
        let rest = match t.strip_prefix("cuda") {
            Some("") => "0",
            Some(r) => r.strip_prefix(':').ok_or_else(bad)?,
            None => return Err(bad()),
        };
        let mut o = Ordinals { list: [0; MAX_DEVICES], len: 0 };
        for part in rest.split(',') {
            if o.len as usize == MAX_DEVICES {
                return Err(bad());
            }
            let p = part.trim();
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            o.list[o.len as usize] = p.parse().map_err(|_| bad())?;
            o.len += 1;
        }
        Ok(Device::Cuda(o))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(o) => {
                write!(f, "cuda:")?;
                for (k, n) in o.as_slice().iter().enumerate() {
                    write!(f, "{}{n}", if k > 0 { "," } else { "" })?;
                }
                Ok(())
            }
        }
    }
}

impl Device {
    /// Whether the vector model's trials run on the CPU.
    pub fn is_cpu(&self) -> bool {
        *self == Device::Cpu
    }

    /// Refuses, before any work, a CUDA device that this build or machine cannot run: a build
    /// without the `cuda` feature, no driver, or an ordinal the driver does not list.
    pub fn check(&self) -> Result<(), DeviceError> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(o) => cuda_check(self, o.as_slice()),
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_check(d: &Device, _: &[u16]) -> Result<(), DeviceError> {
    Err(DeviceError(format!(
        "--device {d}: this build has no CUDA backend (build with `cargo build --release --features cuda`); allowed: cpu"
    )))
}

#[cfg(feature = "cuda")]
fn cuda_check(d: &Device, ordinals: &[u16]) -> Result<(), DeviceError> {
    let count = super::cuda::device_count().map_err(|why| DeviceError(format!("--device {d}: {why}; allowed: cpu")))?;
    if let Some(&bad) = ordinals.iter().find(|&&n| n as usize >= count) {
        return Err(DeviceError(format!(
            "--device {d}: no CUDA device {bad} (this machine has {count}: allowed cuda:0..cuda:{})",
            count.saturating_sub(1)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, shown) in [
            ("cpu", "cpu"),
            ("cuda", "cuda:0"),
            ("cuda:3", "cuda:3"),
            ("cuda:0,1", "cuda:0,1"),
            (" cuda:0, 0 ", "cuda:0,0"),
        ] {
            let d: Device = text.parse().unwrap();
            assert_eq!(d.to_string(), shown, "{text}");
            assert_eq!(shown.parse::<Device>().unwrap(), d);
        }
        for bad in [
            "",
            "gpu",
            "cuda:",
            "cuda:x",
            "cuda:-1",
            "cuda:0,",
            "cuda0",
            "cuda:99999",
            "cuda:0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
        ] {
            let e = bad.parse::<Device>().unwrap_err().0;
            assert!(e.contains("allowed cpu, cuda") && !e.contains('\n'), "{bad}: {e}");
        }
        assert!(Device::Cpu.check().is_ok());
    }

    /// Without the feature every CUDA device is refused, naming the feature (CI checks the
    /// binary's exit code and line in tests/cli/device.rs).
    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_the_feature_refuses_cuda() {
        let e = "cuda:1".parse::<Device>().unwrap().check().unwrap_err().0;
        assert!(
            e.starts_with("--device cuda:1: this build has no CUDA backend") && e.contains("--features cuda"),
            "{e}"
        );
    }
}
