//! Ring-buffer records, decoded into one typed enum. Every record leads with
//! its kind; the kind says which layout follows and how long it must be.

use profiler_common::{
    ContentionEvent, EVENT_AGG_OVERFLOW, EVENT_CONTENTION, EVENT_HOLD, EVENT_OUTLIER, EVENT_USER_STACK,
    EVENT_USER_STACK_COPY, EVENT_YIELD, UserStackCopy, UserStackEvent, YieldEvent, record_size,
};

/// One record from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// A completed wait (stream mode, or aggregate mode's overflow path).
    Wait(ContentionEvent),
    /// A long wait already counted in the aggregate maps: for the
    /// slowest-waits list only.
    Outlier(ContentionEvent),
    /// A hold: `wait_ns` carries the hold time.
    Hold(ContentionEvent),
    /// A `yield_to` call.
    Yield(YieldEvent),
    /// A user stack the kernel stored for the first time.
    UserStack(UserStackEvent),
}

/// Why a record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Shorter than its kind.
    #[error("record of {0} bytes is too short for a kind")]
    Short(usize),
    /// A kind this lockprof does not know.
    #[error("unknown record kind {0}")]
    UnknownKind(u32),
    /// The length does not match the kind's layout.
    #[error("record of kind {kind} has {len} bytes, not {want}")]
    Size {
        /// Kind found.
        kind: u32,
        /// Bytes received.
        len: usize,
        /// Bytes the kind's layout has.
        want: usize,
    },
}

/// Copies a `#[repr(C)]` plain-old-data record out of `bytes` (of exactly its size).
fn read_pod<T: aya::Pod>(bytes: &[u8]) -> T {
    debug_assert_eq!(bytes.len(), std::mem::size_of::<T>());
    // SAFETY: the caller checked that `bytes` holds exactly size_of::<T>()
    // bytes; T is aya::Pod (repr(C), valid for any bit pattern), and
    // read_unaligned makes no alignment assumption.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
}

/// A user stack copy, boxed (8 KiB): None for any other record, or a
/// copy of the wrong size (then [`decode`] says why).
pub fn decode_copy(bytes: &[u8]) -> Option<Box<UserStackCopy>> {
    let kind = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
    if kind != EVENT_USER_STACK_COPY || bytes.len() != std::mem::size_of::<UserStackCopy>() {
        return None;
    }
    Some(Box::new(read_pod(bytes)))
}

/// Decodes one record by its tag.
pub fn decode(bytes: &[u8]) -> Result<Record, Malformed> {
    let kind = u32::from_ne_bytes(
        bytes.get(..4).ok_or(Malformed::Short(bytes.len()))?.try_into().map_err(|_| Malformed::Short(bytes.len()))?,
    );
    let want = record_size(kind).ok_or(Malformed::UnknownKind(kind))?;
    if bytes.len() != want {
        return Err(Malformed::Size { kind, len: bytes.len(), want });
    }
    Ok(match kind {
        EVENT_CONTENTION | EVENT_AGG_OVERFLOW => Record::Wait(read_pod(bytes)),
        EVENT_OUTLIER => Record::Outlier(read_pod(bytes)),
        EVENT_HOLD => Record::Hold(read_pod(bytes)),
        EVENT_YIELD => Record::Yield(read_pod(bytes)),
        EVENT_USER_STACK => Record::UserStack(read_pod(bytes)),
        other => return Err(Malformed::UnknownKind(other)),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The bytes of a plain-old-data value, as the ring buffer carries them.
    pub(crate) fn bytes_of<T: aya::Pod>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a repr(C) POD value we own, for its size.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
    }

    #[test]
    fn records_decode_by_their_tag() {
        let ev =
            ContentionEvent { kind: EVENT_CONTENTION, lock_addr: 0xdead, wait_ns: 42, tid: 7, ..Default::default() };
        assert_eq!(decode(&bytes_of(&ev)), Ok(Record::Wait(ev)));
        let hold = ContentionEvent { kind: EVENT_HOLD, ..ev };
        assert_eq!(decode(&bytes_of(&hold)), Ok(Record::Hold(hold)));
        let out = ContentionEvent { kind: EVENT_OUTLIER, ..ev };
        assert_eq!(decode(&bytes_of(&out)), Ok(Record::Outlier(out)));
        let over = ContentionEvent { kind: EVENT_AGG_OVERFLOW, ..ev };
        assert_eq!(decode(&bytes_of(&over)), Ok(Record::Wait(over)));
        let y = YieldEvent { kind: EVENT_YIELD, latency_ns: 5, tid: 3, ret: 1, ..Default::default() };
        assert_eq!(decode(&bytes_of(&y)), Ok(Record::Yield(y)));
        // Unaligned input decodes too.
        let mut unaligned = [0u8; std::mem::size_of::<ContentionEvent>() + 1];
        unaligned[1..].copy_from_slice(&bytes_of(&ev));
        assert_eq!(decode(&unaligned[1..]), Ok(Record::Wait(ev)));
    }

    #[test]
    fn wrong_tags_and_sizes_are_malformed() {
        let ev = ContentionEvent { kind: EVENT_CONTENTION, ..Default::default() };
        let b = bytes_of(&ev);
        assert_eq!(
            decode(&b[..10]),
            Err(Malformed::Size { kind: EVENT_CONTENTION, len: 10, want: std::mem::size_of::<ContentionEvent>() })
        );
        assert_eq!(decode(&[]), Err(Malformed::Short(0)));
        let bad = ContentionEvent { kind: 77, ..ev };
        assert_eq!(decode(&bytes_of(&bad)), Err(Malformed::UnknownKind(77)));
        // A yield-sized record tagged as a wait is refused, and vice versa.
        let y = YieldEvent { kind: EVENT_CONTENTION, ..Default::default() };
        assert_eq!(
            decode(&bytes_of(&y)),
            Err(Malformed::Size { kind: EVENT_CONTENTION, len: 88, want: std::mem::size_of::<ContentionEvent>() })
        );
    }
}
