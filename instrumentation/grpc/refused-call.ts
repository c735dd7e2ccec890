import type { CallListener, ChannelCall, GrpcMetadata, GrpcStatus } from './grpc-types';

/**
 * Stands in for the call `Channel#createCall` would have made, for a call
 * refused before it starts: no stream is opened, nothing is sent, and the
 * listener gets `status` on the next tick, as grpc-js reports a status that
 * arises before any I/O. Whatever the layers above send into it is dropped.
 */
export function refusedCall(status: GrpcStatus, peer: string, onStatus: (status: GrpcStatus) => void): ChannelCall {
  let listener: CallListener | undefined;
  let final: GrpcStatus | undefined;
  const end = (reported: GrpcStatus) => {
    if (final !== undefined) return;
    final = reported;
    onStatus(reported);
    listener?.onReceiveStatus(reported);
  };
  return {
    start(_metadata: GrpcMetadata, callListener: CallListener) {
      listener = callListener;
      if (final === undefined) process.nextTick(end, status);
      else process.nextTick(() => callListener.onReceiveStatus(final!));
    },
    cancelWithStatus(code: number, details: string) {
      // A cancel before the refusal is delivered wins, as it would on a real call.
      end({ code, details, metadata: status.metadata });
    },
    getPeer: () => peer,
    sendMessageWithContext() {},
    startRead() {},
    halfClose() {},
    getCallNumber: () => 0,
    setCredentials() {},
    getAuthContext: () => null,
  };
}
