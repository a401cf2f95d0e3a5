#!/usr/bin/env node
'use strict';
// The buggy build of the billing processor: the input offsets are committed
// after the transaction, outside it. A crash between the two has the
// restart read the batch again and write its outputs twice.
require('./src/processor').start('after');
