// Package usbnet is gomx's user-space driver for USB CDC Ethernet adapters:
// functions of the Ethernet Control Model (ECM 1.2) and of the Network
// Control Model (NCM 1.0), driven through libusb with the kernel's cdc_ether
// or cdc_ncm driver detached, behind the same nicdrv.NIC interface as the
// VFIO drivers, so the NIC transport (package transport/nic) and mx run over
// a USB link unchanged.
//
// # Layers
//
// The pure parts decode what the device sends and build what it receives,
// with no I/O and no cgo, and are fuzzed against reference decoders written
// apart from them:
//
//   - descriptors (ParseDeviceDescriptor, ParseConfig): a configuration is
//     walked descriptor by descriptor; a communications interface of
//     subclass ECM (0x06) or NCM (0x0D) becomes a Function once its header
//     (0x00), union (0x06) and Ethernet networking (0x0F) functional
//     descriptors are found (and, for NCM, the NCM functional descriptor,
//     0x1A), with the data interface the union names, the alternate setting
//     of that data interface that has a bulk IN and a bulk OUT endpoint, and
//     the interrupt IN endpoint of the notifications. The MAC is the
//     iMACAddress string: twelve hex digits (ParseString, ParseMAC). Every
//     length that runs past its container and every count that does not
//     match what follows is an error (ErrBadDescriptor);
//   - NTB16 framing (NTBWriter, ParseNTB16): an NCM transfer holds several
//     frames behind a 12-byte NTH16 and a table of (offset, length) pairs,
//     the NDP16. The writer places datagrams where the device's
//     GET_NTB_PARAMETERS answer asks (divisor, remainder, NDP alignment, the
//     most datagrams) and never ends a transfer on a packet boundary; the
//     parser follows the chain of NDP16s and rejects every lie about
//     lengths and offsets (ErrBadNTB), dropping the block whole;
//   - notifications (ParseNotifications): NETWORK_CONNECTION (0x00) and
//     CONNECTION_SPEED_CHANGE (0x2A) set the link state.
//
// The driver (Open, NIC) speaks to the device through a small seam, Device:
// control transfers, claiming interfaces (which detaches the kernel's
// driver) and releasing them (which gives them back), alternate settings,
// IN endpoints read with several transfers in flight, and OUT transfers
// submitted one at a time and waited for later (Submit, Transfer).
// Two implementations exist: USBDevice (OpenUSB) over libusb through
// github.com/google/gousb, built only with the usb tag and cgo, and the
// pure-Go device models of package usbnet/usbfake, which the tests cable to
// each other to run the nictest conformance suite for ECM and for NCM.
//
// # Bring-up
//
// Open reads the device and configuration descriptors with GET_DESCRIPTOR,
// picks a Function, reads the MAC, claims the communications and data
// interfaces, and for NCM asks GET_NTB_PARAMETERS, selects NTB16 and sets
// the NTB input size while the data interface is in setting 0, as NCM
// requires. It then selects setting 0 and the data setting (which resets
// the function and starts traffic), sets the packet filter (directed and
// broadcast) with SET_ETHERNET_PACKET_FILTER (0x43) and starts four
// goroutines: the receiver, the transmitter, the transmitter's settler and
// the link watcher.
//
// # Data path
//
// USB moves data by transfers the host controller completes, not by rings
// the driver shares with a NIC, so the nicdrv batch calls meet the pipes in
// memory. The receiver keeps InFlight bulk IN transfers queued, splits
// each completed one into frames (one frame for ECM, the NTB's datagrams
// for NCM), filters them by destination as the host asked (the device is
// asked too, but devices filter imperfectly), and copies each into a pool
// Buffer of the driver's RX ring: RxRing buffers that are either spare or
// hold a received frame. RxBatch hands received frames over and refills the
// ring from the pool; when every buffer of the ring holds a frame the
// receiver stops reading the device until RxBatch takes some, so a slow
// consumer makes the device, not the driver, drop. The transmitter takes
// what TxBatch queued (up to TxRing frames) and sends one bulk OUT transfer
// per frame for ECM, or as many frames as fit one NTB for NCM; a transfer
// that would end on a packet boundary is followed by a zero-length packet
// (ECM) or grows by one byte (NCM), so the device sees where it ends. It
// submits each transfer without waiting for those before it, up to
// OutFlight in flight (the device takes them in submission order, so
// frames keep theirs), and the settler waits for them oldest first,
// counting what they sent and freeing their slots.
// Buffers are copied into the transfer, so they go back to the pool at
// once; memory attached with Buffer.Attach is copied too, and its
// completion comes at the next TxBatch (Info.TxAttachCopied says so, and
// the nic transport then copies what it was asked to send in place,
// counted as copied). WaitRx sleeps until the receiver
// delivers a frame.
//
// # Control path
//
// The link state follows the notifications, starting as up at the bus
// speed, since a device need not notify before its link changes.
// Promiscuous and multicast settings go to the device with
// SET_ETHERNET_PACKET_FILTER and SET_ETHERNET_MULTICAST_FILTERS (0x40,
// or all-multicast when the device filters fewer groups), and to the
// driver's own filter. Statistics are the driver's counts of the frames it
// moved, with the device's RCV_ERROR and RCV_NO_BUFFER counters where its
// bmEthernetStatistics says it keeps them. A USB function has one queue and
// no steering: every rule is refused with nicdrv.ErrNotSupported, as is
// header split at Open.
//
// # Errors and Close
//
// A device that is not CDC, descriptors that lie, an interface another
// process holds, a device node the process may not open, and a device
// unplugged while in use each fail with one line that says what to do
// (ErrNotCDC, ErrBadDescriptor, ErrBusy, ErrAccess, ErrGone). After an
// unplug, RxBatch returns what was already received and then ErrGone;
// WaitRx and TxBatch return it at once; nothing waits forever. Close stops
// the goroutines, puts the data interface back in setting 0, releases the
// interfaces to the kernel's driver and gives every buffer back; it does
// not close the Device, which may be opened again.
//
// # Building with libusb
//
// Everything but USBDevice builds with CGO_ENABLED=0. USBDevice needs cgo
// and libusb's headers: apt-get install libusb-1.0-0-dev pkg-config, then
// go build -tags usb (make build-usb). QEMU's usb-net offers ECM; no QEMU
// model offers NCM, so NCM is proven against the fake device only.
package usbnet
