//! Batch-mode (`batch=ok`) updates between their acceptance and the writer.
//!
//! A caller appends its update here and returns at once; the writer takes
//! everything buffered when it is due (`batch_flush_ms` after it noticed the
//! first, `batch_docs_max` documents, a flush, shutdown) and applies it in
//! one group. Only the append that makes the buffer non-empty, or makes it
//! due, wakes the writer (with `Request::Buffered`): a stream of batch-mode
//! requests costs no thread hand-off per request.
//!
//! Invariants:
//! - **Bounded.** At most twice `batch_docs_max` documents wait here (one
//!   larger update is accepted into an empty buffer: a request is never
//!   split); callers wait beyond.
//! - **Nothing strands.** Appends happen with the database's writer slot
//!   locked, after its `closed` check and with a writer running: a closing
//!   writer's last flush takes every accepted update, and a writer retires
//!   only with the buffer empty. A writer that could not be woken (its
//!   queue was full) is busy, and after every group it checks the buffer.

use crate::writer::UpdateReq;

/// The buffered updates of one database.
#[derive(Default)]
pub(crate) struct BatchBuffer {
    reqs: Vec<UpdateReq>,
    docs: usize,
}

/// What [`BatchBuffer::append`] did.
pub(crate) enum Append {
    /// Buffered; `wake`: the writer must be told (the buffer was empty or
    /// has just become due).
    Accepted { wake: bool },
    /// The buffer is full: the update is given back.
    Full(UpdateReq),
}

impl BatchBuffer {
    /// Buffers `req` unless that would exceed twice `due_docs` documents.
    pub(crate) fn append(&mut self, req: UpdateReq, due_docs: usize) -> Append {
        let n = req.docs.len();
        if !self.reqs.is_empty() && self.docs + n > due_docs.saturating_mul(2) {
            return Append::Full(req);
        }
        let wake = self.reqs.is_empty() || (self.docs < due_docs && self.docs + n >= due_docs);
        self.reqs.push(req);
        self.docs += n;
        Append::Accepted { wake }
    }

    /// Documents buffered.
    pub(crate) fn docs(&self) -> usize {
        self.docs
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Empties the buffer, returning its updates in arrival order.
    pub(crate) fn take(&mut self) -> Vec<UpdateReq> {
        self.docs = 0;
        std::mem::take(&mut self.reqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Durability;
    use settee_core::doc::Doc;

    fn req(n: usize) -> UpdateReq {
        UpdateReq {
            docs: (0..n)
                .map(|i| Doc::new(format!("d{i}"), serde_json::json!({})).unwrap())
                .collect(),
            new_edits: true,
            all_or_nothing: false,
            durability: Durability::Batch,
            reply: None,
        }
    }

    fn wake(a: Append) -> Option<bool> {
        match a {
            Append::Accepted { wake } => Some(wake),
            Append::Full(_) => None,
        }
    }

    #[test]
    fn wakes_on_first_and_on_becoming_due_and_refuses_beyond_twice_due() {
        let mut b = BatchBuffer::default();
        assert_eq!(wake(b.append(req(1), 4)), Some(true), "first: wake");
        assert_eq!(wake(b.append(req(2), 4)), Some(false), "3 < 4: no wake");
        assert_eq!(wake(b.append(req(1), 4)), Some(true), "reaches 4: due");
        assert_eq!(wake(b.append(req(1), 4)), Some(false), "already due");
        assert_eq!(b.docs(), 5);
        assert_eq!(wake(b.append(req(4), 4)), None, "9 > 8: full");
        assert_eq!(wake(b.append(req(3), 4)), Some(false), "8 fits");
        let taken = b.take();
        assert_eq!(taken.len(), 5);
        assert_eq!(taken.iter().map(|r| r.docs.len()).sum::<usize>(), 8);
        assert!(b.is_empty());
        assert_eq!(b.docs(), 0);
        assert_eq!(
            wake(b.append(req(20), 4)),
            Some(true),
            "an empty buffer takes one large update"
        );
        assert_eq!(wake(b.append(req(1), 4)), None);
    }
}
