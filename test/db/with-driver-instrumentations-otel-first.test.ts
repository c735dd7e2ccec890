import { driverInstrumentationSuite } from './driver-instrumentations';

driverInstrumentationSuite('otel-first');
