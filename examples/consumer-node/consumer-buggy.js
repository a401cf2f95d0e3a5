#!/usr/bin/env node
'use strict';
// The deliberately buggy build: ack / offset commit BEFORE the effect's
// transaction (src/settle-buggy.js). scenario-buggy.yaml must catch it.
require('./src/main').start(require('./src/settle-buggy'));
