import { describe, expect, it } from 'vitest';
import { grpcTargetUrl } from '../../instrumentation/grpc/target-url';
import { useEchoSuite } from './helpers';
import { grpcPropagateToSuite } from './propagate-to-helpers';

grpcPropagateToSuite(useEchoSuite());

describe('grpcTargetUrl', () => {
  it.each([
    ['localhost:50051', 'https://localhost:50051/'],
    ['127.0.0.1:50051', 'https://127.0.0.1:50051/'],
    ['api.internal', 'https://api.internal/'],
    ['dns:api.internal:8443', 'https://api.internal:8443/'],
    ['dns:///api.internal:8443', 'https://api.internal:8443/'],
    ['dns://8.8.8.8/api.internal:8443', 'https://api.internal:8443/'],
    ['ipv4:10.0.0.7:50051,10.0.0.8:50051', 'https://10.0.0.7:50051/'],
    ['ipv6:[::1]:50051', 'https://[::1]:50051/'],
    ['unix:/tmp/grpc.sock', undefined],
    ['unix-abstract:name', undefined],
  ])('%s is %s', (target, url) => {
    expect(grpcTargetUrl(target)).toBe(url);
  });
});
