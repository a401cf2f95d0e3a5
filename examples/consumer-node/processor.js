#!/usr/bin/env node
'use strict';
// The correct build of the billing processor: the input offsets are
// committed in the transaction that writes the outputs.
require('./src/processor').start('in-transaction');
