import { propagateToSuite } from './helpers/propagate-to';

propagateToSuite('deadline-first');
