//! A hostile directory: answers that are not JSON, too large, or name a provider by
//! something other than 64 hex characters get a clear error, and nothing is added.
