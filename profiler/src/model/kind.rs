//! Human and machine names of lock types and modes.

use profiler_common::{LockMode, LockType};

/// Stable name of a lock type, as used in JSON, CSV and `--type`.
pub fn type_name(t: LockType) -> &'static str {
    match t {
        LockType::Unknown => "unknown",
        LockType::Spinlock => "spinlock",
        LockType::Rwlock => "rwlock",
        LockType::Rwsem => "rwsem",
        LockType::Mutex => "mutex",
        LockType::RtMutex => "rt-mutex",
        LockType::RwlockRt => "rwlock-rt",
        LockType::PercpuRwsem => "percpu-rwsem",
        LockType::Futex => "futex",
        LockType::FutexPi => "futex-pi",
    }
}

/// Stable name of a lock mode, as used in JSON and CSV.
pub fn mode_name(m: LockMode) -> &'static str {
    match m {
        LockMode::Exclusive => "exclusive",
        LockMode::Read => "read",
        LockMode::Write => "write",
    }
}

/// Short label like perf's: `rwlock:W`, `rwsem:R`, `mutex`.
pub fn type_label(t: LockType, m: LockMode) -> String {
    match m {
        LockMode::Exclusive => type_name(t).to_string(),
        LockMode::Read => format!("{}:R", type_name(t)),
        LockMode::Write => format!("{}:W", type_name(t)),
    }
}

/// Parses a `--type` word (a [`type_name`], or a common alias).
pub fn parse_type(s: &str) -> Option<LockType> {
    let s = s.trim().to_ascii_lowercase();
    LockType::ALL.into_iter().find(|t| type_name(*t) == s).or(match s.as_str() {
        "spin" | "spinlock_t" | "raw_spinlock" => Some(LockType::Spinlock),
        "rwlock_t" | "qrwlock" => Some(LockType::Rwlock),
        "rw_semaphore" | "rw-semaphore" => Some(LockType::Rwsem),
        "rtmutex" | "rt_mutex" => Some(LockType::RtMutex),
        "percpu-rwsem" | "pcpu-sem" | "percpu_rwsem" => Some(LockType::PercpuRwsem),
        "pi-futex" | "futex_pi" | "pi" => Some(LockType::FutexPi),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_name_parses_back() {
        for t in LockType::ALL {
            assert_eq!(parse_type(type_name(t)), Some(t));
        }
        assert_eq!(parse_type(" Mutex "), Some(LockType::Mutex));
        assert_eq!(parse_type("rw_semaphore"), Some(LockType::Rwsem));
        assert_eq!(parse_type("semaphore"), None);
    }

    #[test]
    fn labels_read_like_perf() {
        assert_eq!(type_label(LockType::Rwlock, LockMode::Write), "rwlock:W");
        assert_eq!(type_label(LockType::Rwsem, LockMode::Read), "rwsem:R");
        assert_eq!(type_label(LockType::Mutex, LockMode::Exclusive), "mutex");
    }
}

/// serde for [`LockType`] as its [`type_name`].
pub(crate) mod serde_type {
    use profiler_common::LockType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &LockType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(super::type_name(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LockType, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_type(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown lock type {s:?}")))
    }
}

/// serde for [`LockMode`] as its [`mode_name`].
pub(crate) mod serde_mode {
    use profiler_common::LockMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &LockMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(super::mode_name(*m))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LockMode, D::Error> {
        let s = String::deserialize(d)?;
        [LockMode::Exclusive, LockMode::Read, LockMode::Write]
            .into_iter()
            .find(|m| super::mode_name(*m) == s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown lock mode {s:?}")))
    }
}
