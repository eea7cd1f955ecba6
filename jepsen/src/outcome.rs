//! How a client error is classified (see `history` for the contract).

use tonic::Code;

use crate::history::Outcome;

/// Definite refusals prove the operation did not take effect; everything else is unknown.
pub fn classify(status: &tonic::Status) -> Outcome {
    match status.code() {
        Code::NotFound
        | Code::AlreadyExists
        | Code::Aborted
        | Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::ResourceExhausted => Outcome::Fail,
        _ => Outcome::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguous_errors_are_unknown() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Unknown,
            Code::Internal,
            Code::Cancelled,
        ] {
            assert_eq!(
                classify(&tonic::Status::new(code, "x")),
                Outcome::Unknown,
                "{code:?}"
            );
        }
        for code in [
            Code::NotFound,
            Code::AlreadyExists,
            Code::Aborted,
            Code::FailedPrecondition,
        ] {
            assert_eq!(
                classify(&tonic::Status::new(code, "x")),
                Outcome::Fail,
                "{code:?}"
            );
        }
    }
}
