#!/usr/bin/env node
'use strict';
// The correct build: ack / offset commit after the effect's COMMIT.
require('./src/main').start(require('./src/settle'));
