//! The methods the devnet implements: routing `Service.Method` as brclient's
//! `ServersMap` does and decoding each method's params into its protojson message,
//! apart from what the methods then do.

use brmcp_clientrpc::proto;
use serde_json::Value;

use crate::codec::decode;
use crate::node::{Log, StreamKind};

/// The services brclient binds; a method of one of these that the devnet does not
/// implement is an "unknown method", any other service an "unknown service".
const SERVICES: &[&str] = &[
    "VersionService",
    "ChatService",
    "GCService",
    "PostsService",
    "PaymentsService",
    "ResourcesService",
    "ContentService",
];

/// The methods the devnet implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Version,
    Keepalive,
    UserPublicIdentity,
    UserNick,
    Pm,
    PmStream,
    AckPm,
    KxStream,
    AckKx,
    MediateKx,
    TipUser,
    TipProgress,
    AckTipProgress,
    TipStream,
    AckTipReceived,
    SubscribeToPosts,
    UnsubscribeToPosts,
    PostsStream,
    AckReceivedPost,
    PostsStatusStream,
    AckReceivedPostStatus,
}

/// `PostsService` methods (the client crate names only those it calls).
mod posts_method {
    pub(super) const SUBSCRIBE: &str = "PostsService.SubscribeToPosts";
    pub(super) const UNSUBSCRIBE: &str = "PostsService.UnsubscribeToPosts";
    pub(super) const STREAM: &str = "PostsService.PostsStream";
    pub(super) const ACK: &str = "PostsService.AckReceivedPost";
    pub(super) const STATUS_STREAM: &str = "PostsService.PostsStatusStream";
    pub(super) const STATUS_ACK: &str = "PostsService.AckReceivedPostStatus";
}

/// A request's params, decoded into its method's message.
#[derive(Debug)]
pub(super) enum Params {
    /// `VersionRequest`, `PublicIdentityReq`: no fields.
    None,
    Keepalive(proto::KeepaliveStreamRequest),
    UserNick(proto::UserNickRequest),
    Pm(proto::PmRequest),
    /// A stream open's `unacked_from`.
    Stream(u64),
    /// An acknowledgement's `sequence_id`.
    Ack(u64),
    TipUser(proto::TipUserRequest),
    MediateKx(proto::MediateKxRequest),
    /// `SubscribeToPosts` (true) or `UnsubscribeToPosts`: the user.
    PostSub(String, bool),
}

impl Method {
    /// Routes `Service.Method` like `ServersMap.SvcForMethod`.
    pub(super) fn lookup(method: &str) -> Result<Self, &'static str> {
        use brmcp_clientrpc::proto::method as m;
        let Some((svc, _)) = method.split_once('.') else {
            return Err("method is not Service.Method");
        };
        if !SERVICES.contains(&svc) {
            return Err("unknown service");
        }
        Ok(match method {
            m::VERSION => Self::Version,
            m::KEEPALIVE_STREAM => Self::Keepalive,
            m::USER_PUBLIC_IDENTITY => Self::UserPublicIdentity,
            m::USER_NICK => Self::UserNick,
            m::PM => Self::Pm,
            m::PM_STREAM => Self::PmStream,
            m::ACK_RECEIVED_PM => Self::AckPm,
            m::KX_STREAM => Self::KxStream,
            m::ACK_KX_COMPLETED => Self::AckKx,
            m::MEDIATE_KX => Self::MediateKx,
            m::TIP_USER => Self::TipUser,
            m::TIP_PROGRESS => Self::TipProgress,
            m::ACK_TIP_PROGRESS => Self::AckTipProgress,
            m::TIP_STREAM => Self::TipStream,
            m::ACK_TIP_RECEIVED => Self::AckTipReceived,
            posts_method::SUBSCRIBE => Self::SubscribeToPosts,
            posts_method::UNSUBSCRIBE => Self::UnsubscribeToPosts,
            posts_method::STREAM => Self::PostsStream,
            posts_method::ACK => Self::AckReceivedPost,
            posts_method::STATUS_STREAM => Self::PostsStatusStream,
            posts_method::STATUS_ACK => Self::AckReceivedPostStatus,
            _ => return Err("unknown method"),
        })
    }

    /// Decodes `params` into this method's request message.
    pub(super) fn decode(self, params: Option<&Value>) -> Result<Params, String> {
        Ok(match self {
            Self::Version => decode::<proto::VersionRequest>(params).map(|_| Params::None)?,
            Self::UserPublicIdentity => {
                decode::<proto::PublicIdentityReq>(params).map(|_| Params::None)?
            }
            Self::Keepalive => Params::Keepalive(decode(params)?),
            Self::UserNick => Params::UserNick(decode(params)?),
            Self::Pm => Params::Pm(decode(params)?),
            Self::PmStream => {
                Params::Stream(decode::<proto::PmStreamRequest>(params)?.unacked_from)
            }
            Self::KxStream => {
                Params::Stream(decode::<proto::KxStreamRequest>(params)?.unacked_from)
            }
            Self::TipProgress => {
                Params::Stream(decode::<proto::TipProgressRequest>(params)?.unacked_from)
            }
            Self::TipStream => {
                Params::Stream(decode::<proto::TipStreamRequest>(params)?.unacked_from)
            }
            Self::PostsStream => {
                Params::Stream(decode::<proto::PostsStreamRequest>(params)?.unacked_from)
            }
            Self::PostsStatusStream => {
                Params::Stream(decode::<proto::PostsStatusStreamRequest>(params)?.unacked_from)
            }
            Self::SubscribeToPosts => {
                Params::PostSub(decode::<proto::SubscribeToPostsRequest>(params)?.user, true)
            }
            Self::UnsubscribeToPosts => Params::PostSub(
                decode::<proto::UnsubscribeToPostsRequest>(params)?.user,
                false,
            ),
            Self::AckPm
            | Self::AckKx
            | Self::AckTipProgress
            | Self::AckTipReceived
            | Self::AckReceivedPost
            | Self::AckReceivedPostStatus => {
                Params::Ack(decode::<proto::AckRequest>(params)?.sequence_id)
            }
            Self::TipUser => Params::TipUser(decode(params)?),
            Self::MediateKx => Params::MediateKx(decode(params)?),
        })
    }

    /// The replay log behind a stream or an ack.
    pub(super) fn kind(self) -> Option<Log> {
        match self {
            Self::PmStream | Self::AckPm => Some(StreamKind::Pm.into()),
            Self::KxStream | Self::AckKx => Some(StreamKind::Kx.into()),
            Self::TipProgress | Self::AckTipProgress => Some(StreamKind::TipProgress.into()),
            Self::TipStream | Self::AckTipReceived => Some(StreamKind::TipReceived.into()),
            Self::PostsStream | Self::AckReceivedPost => Some(Log::Posts),
            Self::PostsStatusStream | Self::AckReceivedPostStatus => Some(Log::PostStatus),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_errors() {
        assert_eq!(Method::lookup("ChatService.PM"), Ok(Method::Pm));
        assert_eq!(Method::lookup("NoService.PM"), Err("unknown service"));
        assert_eq!(Method::lookup("GCService.List"), Err("unknown method"));
        assert_eq!(
            Method::lookup("ChatService.PMStream[0000000a]"),
            Err("unknown method")
        );
        assert_eq!(
            Method::lookup("Version"),
            Err("method is not Service.Method")
        );
    }
}
