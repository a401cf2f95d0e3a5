package scenarios

import "testing"

func TestSmokeTmp(t *testing.T) {
	for _, s := range Builtin() {
		t.Log(s.Name, s.Broker.Kind, s.Expect.Verdict, s.Expect.Anomaly)
	}
	_, err := Parse("my.yaml", []byte("name: x\nbroker: kafak\nworkload:\n  rate: -5\n  rat: 3\n  subscriptions: [a, b]\nvariants:\n  consumer: inbx\nnemesis:\n  timeline:\n    - at 40s: kill relay-9\n  failpoints:\n    relay-1: relay.before-publish\n"))
	t.Log(err)
	_, err = Parse("my.yaml", []byte("name: x\nbroker: kafka\nworkload:\n  subscriptions: [a, b]\nnemesis:\n  timeline:\n    - at 20s: kill relay-9\n    - at 1s: partition consumer-a-0\n  failpoints:\n    relay-1: relay.before-publish\n    relay-0: consumer.after-commit-before-ack\nexpect: {anomaly: order-regression}\nbroker: x\n"))
	t.Log(err)
	_, err = Parse("my.yaml", []byte("name: x\n broker: kafka\n"))
	t.Log(err)
	s, _ := Lookup("order-confirmation")
	t.Log(s.Set("workload.rat", "5"))
	t.Log(s.Set("workload.rate", "-5"))
	t.Log(s.Set("broker", "kafka"))
	t.Log(s.Set("variants.consumer", "x"))
	t.Log(s.Set("nemesis.failpoints.relay-0", "relay.before-publish=kill(3)"), s.Nemesis.Failpoints)
	b, _ := s.Marshal()
	t.Log(string(b))
}
