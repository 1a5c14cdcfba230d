//! Read helpers for the HTTP API that combine several [`crate::Reader`]
//! calls (revs_diff, bulk_get). Pure functions over a snapshot reader.
