import { driverInstrumentationSuite } from './driver-instrumentations';

driverInstrumentationSuite('deadline-first');
